// Package procgroup runs the programs Euterpe hands work to — the edge's
// exec backends and thumbnail ffmpeg, central's ffmpeg and ffprobe, the
// pipeline's exec stages — so that nothing they start in their process
// group outlives the work.
//
// A program runs in a process group of its own. Cancelling its context
// kills the whole group, not only the program: a site wrapper (nice,
// ionice, a script setting a library path) runs the real tool as its child,
// and killing the wrapper alone would leave the tool running for work given
// up, holding the output pipes open. Once the program exits, whatever is
// left of its group is killed before the program is reaped, so the group id
// cannot have passed to another process by then. And the kernel kills the
// program when the daemon that started it dies, even by SIGKILL
// (PR_SET_PDEATHSIG), so a crashed worker does not leave a model or an
// encoder running unowned; what the program itself started is cleaned up by
// the service manager (systemd's control-group kill, a container's end).
// What leaves the group — started with setsid, by GNU timeout (which makes
// a group of its own unless given --foreground), or by a daemonising
// helper — is not killed on cancel or exit: it runs on until it ends or
// the service stops; holding the program's output open, it makes Wait
// return exec.ErrWaitDelay after the program exits.
package procgroup
