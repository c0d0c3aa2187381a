// A Widget operator written with controller-runtime, as kubebuilder scaffolds
// one: a manager, its cache's informers, one controller whose reconciler
// writes status through the status subresource. Its watches and its writes
// share client-go's one HTTP/2 connection to the apiserver; each reconcile is
// an OpenTelemetry span around the client's request spans.
//
//	cr-operator [--kubeconfig FILE] [--server URL [--insecure-skip-tls-verify] [--token T]]
//	  [--namespace default] [--status-write update|patch] [--swallow]
//
// Leader election, the metrics server and the health probes are off: the
// testbed runs one replica on loopback and reads nothing from them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

type options struct {
	kubeconfig, server, token, namespace string
	insecure, swallow                    bool
	verb                                 statusVerb
}

func parseFlags() (options, error) {
	var o options
	var verb string
	// --kubeconfig is controller-runtime's own flag (pkg/client/config registers
	// it), which kubebuilder's main.go relies on through ctrl.GetConfig().
	flag.StringVar(&o.server, "server", "", "apiserver URL, https://HOST:PORT (overrides the kubeconfig's)")
	flag.StringVar(&o.token, "token", "", "bearer token, with --server and no kubeconfig")
	flag.BoolVar(&o.insecure, "insecure-skip-tls-verify", false, "with --server and no kubeconfig: do not check the server's certificate")
	flag.StringVar(&o.namespace, "namespace", "default", "namespace whose widgets are watched and reconciled")
	flag.StringVar(&verb, "status-write", string(statusUpdate), "update (Status().Update(), a PUT) | patch (Status().Patch(), a merge PATCH)")
	flag.BoolVar(&o.swallow, "swallow", false, "log a failed status write and report success")
	flag.Parse()
	if kubeconfig := flag.Lookup("kubeconfig"); kubeconfig != nil {
		o.kubeconfig = kubeconfig.Value.String()
	}
	o.verb = statusVerb(verb)
	if o.verb != statusUpdate && o.verb != statusPatch {
		return o, fmt.Errorf("--status-write must be update or patch, not %q", verb)
	}
	return o, nil
}

// restConfig: --server alone is the whole configuration; otherwise
// controller-runtime's lookup (--kubeconfig, $KUBECONFIG, in-cluster,
// ~/.kube/config), with --server overriding the address it names.
func restConfig(o options) (*rest.Config, error) {
	if o.server != "" && o.kubeconfig == "" {
		return &rest.Config{Host: o.server, BearerToken: o.token, TLSClientConfig: rest.TLSClientConfig{Insecure: o.insecure}}, nil
	}
	config, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	if o.server != "" {
		config.Host = o.server
	}
	return config, nil
}

func main() {
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("cr-operator")
	if err := run(); err != nil {
		log.Error(err, "exiting")
		os.Exit(1)
	}
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	provider, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// Spans still batched go out before the process ends.
		flushCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = provider.Shutdown(flushCtx)
	}()

	config, err := restConfig(o)
	if err != nil {
		return err
	}
	traceRequests(config, provider)
	scheme := runtime.NewScheme()
	if err := addWidgetTypes(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}},
	})
	if err != nil {
		return err
	}
	reconciler := &WidgetReconciler{Client: mgr.GetClient(), Tracer: provider.Tracer("cr-operator"), Verb: o.verb, Swallow: o.swallow}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.Add(announceReady(mgr)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// announceReady prints one JSON line on stdout once the cache has synced:
// from then on every widget change is reconciled.
func announceReady(mgr ctrl.Manager) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // stopping before it synced
		}
		fmt.Printf("{\"ready\":true,\"pid\":%d}\n", os.Getpid())
		return nil
	})
}
