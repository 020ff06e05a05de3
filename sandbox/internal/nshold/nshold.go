// Package nshold is the short-lived process that makes a job's user and network
// namespaces ahead of the job (sandbox/jobns.go): the node starts its own binary with
// Arg in new namespaces, and pins them while it waits. Its init runs it, early, in any
// binary that imports the sandbox.
package nshold

// Arg is the only argument of a holder process.
const Arg = "gpunex-hold-namespaces"

// Ready is the line a holder prints once its namespaces are set up.
const Ready = "ready"
