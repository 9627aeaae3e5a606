package cuda

import (
	"errors"
	"fmt"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// ErrBackendName: Select got a name other than cpu, cuda or auto.
var ErrBackendName = errors.New("cuda: unknown backend name")

// Select maps a config's backend name to an engine.BackendFactory:
// "cpu" (or "") → nil (the engine's CPU default); "cuda" → this backend,
// failing when no GPU is usable; "auto" → this backend, falling back to the
// CPU backend with options cpuOpt when no GPU is usable (no driver,
// no device, kernels that do not load: engine.ErrBackendMissing). The
// fallback reason is passed to onFallback when it is not nil. This is the
// one backend selection path (specgate serve uses it).
func Select(name string, opt Options, cpuOpt engine.CPUOptions, onFallback func(error)) (engine.BackendFactory, error) {
	switch name {
	case "", "cpu":
		return nil, nil
	case "cuda":
		return Factory(opt), nil
	case "auto":
		gpu := Factory(opt)
		return func(cfg engine.Config, w *engine.Weights, numSlots int) (engine.Backend, error) {
			b, err := gpu(cfg, w, numSlots)
			if err == nil {
				return b, nil
			}
			if !errors.Is(err, engine.ErrBackendMissing) && !errors.Is(err, kernels.ErrNoCUDA) {
				return nil, err
			}
			if onFallback != nil {
				onFallback(err)
			}
			return engine.NewCPUBackendOpts(cfg, w, numSlots, cpuOpt)
		}, nil
	}
	return nil, fmt.Errorf("backend %q (want cpu, cuda or auto): %w", name, ErrBackendName)
}
