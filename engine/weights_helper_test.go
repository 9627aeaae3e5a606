package engine

import "github.com/specgate/specgate/engine/model"

// tensorShapes lists every tensor name of cfg with its shape ([name, []int64]).
func tensorShapes(cfg Config) [][2]any {
	var out [][2]any
	for _, s := range model.Tensors(cfg) {
		sh := make([]int64, len(s.Shape))
		for i, d := range s.Shape {
			sh[i] = int64(d)
		}
		out = append(out, [2]any{s.Name, sh})
	}
	return out
}
