package main

import (
	"context"
	"time"

	"github.com/vesta-cx/euterpe/central/webhook"
)

func init() {
	register(&Command{Path: "webhook verify", Usage: "--secret S [--secret OLD] | --secret-env NAME [--skew 5m] < request",
		Summary: "check the signature and timestamp of a saved webhook request (exit 0 valid, 1 rejected)",
		Run: func(_ context.Context, env Env, args []string) int {
			// Its flags print to stderr as any command's do (flagOutput).
			return webhook.RunVerifyCommand(args, env.Stdin, env.Stdout, flagOutput{env.Stderr}, env.Getenv, time.Now())
		}})
}
