package main

import "github.com/specgate/specgate/engine"

// testEngineOptions, set only by tests, adjusts the options of every engine
// that serve and bench workload build (nil in the command). Tests use it
// to give the adaptive speculation budget a fixed step-cost curve
// (engine.Options.StepCost), so whether it drafts does not depend on how
// loaded the machine running the tests is.
var testEngineOptions func(*engine.Options)
