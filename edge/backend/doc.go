// Package backend runs the work behind an edge job. Each task (chat, plan,
// code, embed, tool, rag) is bound by configuration to one backend: an
// OpenAI-compatible LLM server (llama.cpp server, Ollama, vLLM) reached over
// POST /v1/chat/completions with streaming, or /v1/embeddings; an external
// program that reads the payload JSON on stdin and writes the result JSON on
// stdout, run in its own process group, killed whole on cancellation and
// when it exits (what it starts outside that group — setsid, GNU timeout
// without --foreground — is not killed, only logged); or an HTTP endpoint
// the payload is POSTed to.
//
// A backend turns a job's payload into a result document, streaming text
// fragments through a callback as they arrive. Failures come back as *Error
// values carrying the code, upstream status and a message capped at 512
// characters that the worker stores in the job's error field verbatim.
// Cancellation is the context's: every backend abandons its call as soon as
// the context is done.
package backend
