// Package sandbox will hold the job runtime: the Runtime interface, its containerd
// implementation and the test suite both it and its fake must pass (jobs issue). Nothing
// here yet; the folder is part of the repository layout fixed by the design.
package sandbox
