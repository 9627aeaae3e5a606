package gateway

import (
	"fmt"
	"slices"
	"testing"

	"github.com/specgate/specgate/tokenizer"
)

// TestPromptMemo: memoized prompts equal renderPrompt's (with the shipped
// model's chat template and a plain tokenizer), per model, returned as
// copies, and the memo stays bounded.
func TestPromptMemo(t *testing.T) {
	models := []*LocalModel{fakeModel("plain", nil)}
	if testing.Short() {
		t.Log("shipped model skipped under -short")
	} else {
		models = append(models, shippedModel(t))
	}
	var pm promptMemo
	for _, m := range models {
		for i := range 3 {
			msgs := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: fmt.Sprintf("What is %d + %d?", i, i)}}
			want, err := renderPrompt(m.Tokenizer, msgs)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				got, err := pm.render(m, msgs)
				if err != nil || !slices.Equal(got, want) {
					t.Fatalf("%s: memo %v, %v; want %v", m.Name, got, err, want)
				}
				got[0] = -1 // the caller owns its copy
			}
		}
	}
	// Another model with the same messages gets its own tokens.
	other := fakeModel("other", nil)
	msgs := []tokenizer.Message{{Role: "user", Content: "hi"}}
	a, _ := pm.render(models[0], msgs)
	b, _ := pm.render(other, msgs)
	if !slices.Equal(a, b) || len(pm.cur) < 2 {
		t.Fatalf("per-model entries: %v %v, %d entries", a, b, len(pm.cur))
	}
	// Bounded: two generations of at most promptMemoBytes.
	big := string(make([]byte, 8000))
	for i := range 3000 {
		if _, err := pm.render(models[0], []tokenizer.Message{{Role: "user", Content: fmt.Sprint(i, big)}}); err != nil {
			t.Fatal(err)
		}
		if pm.curBytes > promptMemoBytes {
			t.Fatalf("generation holds %d bytes", pm.curBytes)
		}
	}
}
