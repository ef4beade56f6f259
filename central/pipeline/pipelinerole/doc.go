// Package pipelinerole composes the pipeline queue into euterpe-central as
// the role "pipeline" (on by default): its EUTERPE_PIPELINE_* settings, the
// job types (edge_daily and EUTERPE_PIPELINE_TYPES), the worker, the
// scheduler, the operator API with its OpenAPI fragment, the /ready checks
// "queue" and "repo", and the euterpe_pipeline_* metrics.
package pipelinerole
