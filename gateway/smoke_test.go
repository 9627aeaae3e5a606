package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestSmokeFake(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "hello world"})}})
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"stop":["o w"],"logprobs":true,"top_logprobs":1}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":3}`,
		`{"model":"x","messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`,
		`{"model":"m",`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`,
	} {
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(bufio.NewReader(resp.Body))
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-Request-ID"), string(b))
	}
	resp, _ := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":["a","b"],"echo":true,"max_tokens":4}`))
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(strings.Repeat("x", 5<<20)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	resp, _ = http.Get(ts.URL + "/v1/models")
	b, _ = io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
}
