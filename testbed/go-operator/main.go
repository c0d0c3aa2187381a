// A sample operator in Go, shaped like a controller-runtime one where it
// matters to lostwrite: one HTTP/2 connection to the apiserver carries its
// watch and its status writes (client-go configures golang.org/x/net/http2
// the same way), every status write is a merge PATCH to …/status with a
// request timeout, and each reconcile is an OpenTelemetry span (OTLP/JSON,
// sent with the standard library: the testbed builds offline).
//
//	go-operator --server https://127.0.0.1:6443 --namespace default --mode swallow \
//	  --otlp http://127.0.0.1:4318 [--family xnet|std] [--timeout 2s]
//
// Modes: "correct" requeues a failed write and marks its span ERROR;
// "swallow" logs nothing, drops the write and ends the span OK — the silent
// loss lostwrite exists to catch.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

type widget struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		Generation      int64  `json:"generation"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Status struct {
		ObservedGeneration int64 `json:"observedGeneration"`
	} `json:"status"`
}

type watchEvent struct {
	Type   string `json:"type"`
	Object widget `json:"object"`
}

type options struct {
	server, namespace, mode, family, otlp string
	timeout                               time.Duration
}

func main() {
	var opts options
	flag.StringVar(&opts.server, "server", "", "apiserver URL, https://HOST:PORT")
	flag.StringVar(&opts.namespace, "namespace", "default", "namespace whose widgets are reconciled")
	flag.StringVar(&opts.mode, "mode", "correct", "correct | swallow")
	flag.StringVar(&opts.family, "family", "xnet", "HTTP/2 client: xnet (golang.org/x/net/http2, as client-go) | std (net/http's bundled copy)")
	flag.StringVar(&opts.otlp, "otlp", "", "OTLP/HTTP base URL for reconcile spans; empty: none")
	flag.DurationVar(&opts.timeout, "timeout", 2*time.Second, "timeout of each status write")
	flag.Parse()
	if opts.server == "" || (opts.mode != "correct" && opts.mode != "swallow") || (opts.family != "xnet" && opts.family != "std") {
		fmt.Fprintln(os.Stderr, "go-operator: need --server, --mode correct|swallow, --family xnet|std")
		os.Exit(2)
	}
	op := &operator{opts: opts, client: newClient(opts.family), spans: newSpanExporter(opts.otlp)}
	op.run()
}

func newClient(family string) *http.Client {
	tlsConfig := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	if family == "std" {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
	}
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConfig}}
}

type operator struct {
	opts   options
	client *http.Client
	spans  *spanExporter
	mu     sync.Mutex
	queued map[string]widget
	wake   chan struct{}
}

func (op *operator) widgetsURL() string {
	return fmt.Sprintf("%s/apis/demo.lostwrite.dev/v1/namespaces/%s/widgets", op.opts.server, op.opts.namespace)
}

func (op *operator) run() {
	op.queued = map[string]widget{}
	op.wake = make(chan struct{}, 1)
	go op.worker()
	fmt.Printf("{\"ready\":true,\"pid\":%d}\n", os.Getpid())
	for {
		if err := op.watch(); err != nil {
			fmt.Fprintln(os.Stderr, "watch:", err)
		}
		// client-go's reflector backs off about a second before it watches again.
		time.Sleep(time.Second)
	}
}

// watch streams widget events on the shared connection and queues every
// widget whose status lags its generation.
func (op *operator) watch() error {
	resp, err := op.client.Get(op.widgetsURL() + "?watch=1&allowWatchBookmarks=true")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch answered %s", resp.Status)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		var event watchEvent
		if json.Unmarshal(lines.Bytes(), &event) != nil || (event.Type != "ADDED" && event.Type != "MODIFIED") {
			continue
		}
		w := event.Object
		if w.Status.ObservedGeneration != w.Metadata.Generation {
			op.enqueue(w)
		}
	}
	return lines.Err()
}

func (op *operator) enqueue(w widget) {
	op.mu.Lock()
	op.queued[w.Metadata.Name] = w
	op.mu.Unlock()
	select {
	case op.wake <- struct{}{}:
	default:
	}
}

func (op *operator) worker() {
	for range op.wake {
		for {
			op.mu.Lock()
			var next *widget
			for name, w := range op.queued {
				w := w
				next = &w
				delete(op.queued, name)
				break
			}
			op.mu.Unlock()
			if next == nil {
				break
			}
			if err := op.reconcile(*next); err != nil && op.opts.mode == "correct" {
				time.AfterFunc(500*time.Millisecond, func() { op.enqueue(*next) })
			}
		}
	}
}

func (op *operator) reconcile(w widget) error {
	span := op.spans.start("reconcile", map[string]string{
		"controller": "widget", "controllerKind": "Widget", "namespace": w.Metadata.Namespace, "name": w.Metadata.Name,
	})
	err := op.writeStatus(span, w)
	if op.opts.mode == "swallow" {
		span.end(nil) // the error is dropped on the floor: the span says all went well
		return nil
	}
	span.end(err)
	return err
}

// writeStatus sends the status patch; like client-go, a 429 with
// Retry-After is waited out and sent again, each try its own client span.
func (op *operator) writeStatus(parent *span, w widget) error {
	path := fmt.Sprintf("/apis/demo.lostwrite.dev/v1/namespaces/%s/widgets/%s/status", w.Metadata.Namespace, w.Metadata.Name)
	body := fmt.Sprintf(`{"status":{"observedGeneration":%d,"phase":"Ready"}}`, w.Metadata.Generation)
	for attempt := 1; ; attempt++ {
		retryAfter, err := op.patch(parent, path, body)
		if retryAfter <= 0 || attempt == 5 {
			return err
		}
		time.Sleep(retryAfter)
	}
}

// patch is one try; it returns how long to wait before the next one (0: no retry).
func (op *operator) patch(parent *span, path, body string) (time.Duration, error) {
	client := op.spans.child(parent, "PATCH", map[string]string{
		"http.request.method": "PATCH", "url.full": op.opts.server + path,
	})
	ctx, cancel := context.WithTimeout(context.Background(), op.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, op.opts.server+path, bytes.NewBufferString(body))
	if err != nil {
		client.end(err)
		return 0, err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := op.client.Do(req)
	if err != nil {
		client.end(err)
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.attributes["http.response.status_code"] = strconv.Itoa(resp.StatusCode)
	if resp.StatusCode < 300 {
		client.end(nil)
		return 0, nil
	}
	err = fmt.Errorf("status write answered %s", resp.Status)
	client.end(err)
	if seconds, convErr := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode == http.StatusTooManyRequests && convErr == nil {
		return time.Duration(seconds) * time.Second, err
	}
	return 0, err
}

// spans: just enough OTLP/JSON for lostwrite's receiver.

type span struct {
	exporter        *spanExporter
	traceID, spanID string
	parentID, name  string
	kind            int
	start           time.Time
	attributes      map[string]string
}

type spanExporter struct {
	url    string
	client *http.Client
}

func newSpanExporter(base string) *spanExporter {
	return &spanExporter{url: base, client: &http.Client{Timeout: 2 * time.Second}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *spanExporter) start(name string, attributes map[string]string) *span {
	return &span{exporter: e, traceID: randomHex(16), spanID: randomHex(8), name: name, kind: 1, start: time.Now(), attributes: attributes}
}

func (e *spanExporter) child(parent *span, name string, attributes map[string]string) *span {
	return &span{exporter: e, traceID: parent.traceID, spanID: randomHex(8), parentID: parent.spanID, name: name, kind: 3, start: time.Now(), attributes: attributes}
}

func (s *span) end(err error) {
	if s.exporter.url == "" {
		return
	}
	status := map[string]any{"code": 1}
	if err != nil {
		status = map[string]any{"code": 2, "message": err.Error()}
	}
	var attributes []map[string]any
	for key, value := range s.attributes {
		attributes = append(attributes, map[string]any{"key": key, "value": map[string]any{"stringValue": value}})
	}
	if code, ok := s.attributes["http.response.status_code"]; ok {
		n, _ := strconv.Atoi(code)
		for i := range attributes {
			if attributes[i]["key"] == "http.response.status_code" {
				attributes[i]["value"] = map[string]any{"intValue": strconv.Itoa(n)}
			}
		}
	}
	payload := map[string]any{"resourceSpans": []any{map[string]any{
		"resource": map[string]any{"attributes": []any{
			map[string]any{"key": "service.name", "value": map[string]any{"stringValue": "go-operator"}},
			map[string]any{"key": "process.pid", "value": map[string]any{"intValue": strconv.Itoa(os.Getpid())}},
		}},
		"scopeSpans": []any{map[string]any{"spans": []any{map[string]any{
			"traceId": s.traceID, "spanId": s.spanID, "parentSpanId": s.parentID, "name": s.name, "kind": s.kind,
			"startTimeUnixNano": strconv.FormatInt(s.start.UnixNano(), 10), "endTimeUnixNano": strconv.FormatInt(time.Now().UnixNano(), 10),
			"attributes": attributes, "status": status,
		}}}},
	}}}
	body, _ := json.Marshal(payload)
	resp, postErr := s.exporter.client.Post(s.exporter.url+"/v1/traces", "application/json", bytes.NewReader(body))
	if postErr != nil {
		fmt.Fprintln(os.Stderr, "span export:", postErr)
		return
	}
	resp.Body.Close()
}
