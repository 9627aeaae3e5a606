package kernels

import "fmt"

// AddBiasRows adds bias [N] (fp32) to every row of x [T][N] (fp32).
func (c *Ctx) AddBiasRows(x, bias DevicePtr, N, T int) error {
	if N <= 0 || T <= 0 {
		return fmt.Errorf("add_bias_rows N=%d T=%d: %w", N, T, ErrBadArg)
	}
	return c.launchByNamePDL("add_bias_rows", grid1(N*T), Dim3{256, 1, 1}, 0, P(x), P(bias), I(N), I(T))
}
