package main

import "time"

// validate checks relations between settings once every one of them is
// parsed and in range, before anything is started: the gateway's own, then
// each plugin's against the daemon-wide ones. It runs as a daemon.Config
// check, so Parse reports it like any other bad setting.
func (s *serveSettings) validate() error {
	if err := s.Gateway.Validate(); err != nil {
		return err
	}
	d := DaemonSettings{Grace: s.Grace, JobTTL: time.Duration(s.Gateway.JobTTL) * time.Second}
	for _, p := range plugins {
		if p.Validate == nil {
			continue
		}
		if err := p.Validate(d); err != nil {
			return err
		}
	}
	return nil
}
