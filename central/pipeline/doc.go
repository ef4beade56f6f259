// Package pipeline is central's daily pipeline queue (the pipeline-queue
// contract): the job repo and the queue are one table, pipeline_jobs, whose
// rows are claimed under the one lease protocol of daemon/lease (the
// visibility timeout is the lease, renewed by heartbeats and fenced by
// claim_version). Submit runs the contract's create_queued and enqueue in one
// transaction, so a job can never be created without being enqueued. A
// worker runs each job's type — a chain of Stages (fetch, transform,
// quality, storage) registered in Go, or an external program or HTTP
// endpoint configured by EUTERPE_PIPELINE_TYPES — and records the outcome
// along the Transitions table. The scheduler enqueues the daily runs; the
// operator API, /ready checks and metrics are here too.
package pipeline
