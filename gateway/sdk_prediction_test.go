package gateway

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNodeSDKPrediction runs tools/node/prediction_check.mjs: the official
// OpenAI Node SDK sends `prediction` (a string and text parts, streamed
// and not) and reads usage.completion_tokens_details.accepted_prediction_tokens
// and rejected_prediction_tokens; the answer equals the one without a
// prediction; a malformed prediction is a BadRequestError naming
// prediction.content.
func TestNodeSDKPrediction(t *testing.T) {
	peers := nodePeers(t, "openai")
	ts := startServer(t, Options{Models: []*LocalModel{fixedDraftModel(t)}})
	arg, _ := json.Marshal(map[string]string{"base": ts.URL, "model": "specgate-target"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "prediction_check.mjs", string(arg))
	cmd.Dir = peers
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node prediction_check.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var results []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("prediction_check output %q: %v", out, err)
	}
	if len(results) != 6 {
		t.Errorf("%d checks ran, want 6", len(results))
	}
	for _, r := range results {
		if r.OK {
			t.Logf("ok   %s: %s", r.Name, r.Detail)
		} else {
			t.Errorf("FAIL %s: %s", r.Name, r.Detail)
		}
	}
}
