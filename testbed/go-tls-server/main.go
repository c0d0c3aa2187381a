// A TLS server with Go's crypto/tls and net/http, the stacks the kube-apiserver
// runs on, for tests of fresh connections: it reads one request, HTTP/1.1 or
// HTTP/2 (ALPN), and never answers. A request whose path holds "/reset/" gets
// a TCP reset, any other a close (close_notify, then FIN). It requests no
// client certificate, so Go's TLS 1.3 server sends its session ticket in its
// first flight, before the client's Finished: over HTTP/1.1 nothing but the
// close comes after the request; over HTTP/2 the server's SETTINGS, its
// SETTINGS ACK and WINDOW_UPDATEs do. With -request-client-cert it asks for
// a client certificate, as an apiserver with a client CA does: its TLS 1.3
// ticket then comes once the client's second flight is read, and can arrive
// after the request.
//
// Usage: go-tls-server [-request-client-cert]   (prints {"port":N} once listening on 127.0.0.1)
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

type connKey struct{}

func main() {
	requestClientCert := flag.Bool("request-client-cert", false, "ask clients for a certificate (not required), as an apiserver with a client CA does")
	flag.Parse()
	clientAuth := tls.NoClientCert
	if *requestClientCert {
		clientAuth = tls.RequestClientCert
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	template := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	check(err)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	server := &http.Server{
		Handler: http.HandlerFunc(neverAnswer),
		// The handler ends the connection itself, under HTTP/2 too.
		ConnContext: func(ctx context.Context, conn net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, conn)
		},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12, ClientAuth: clientAuth},
	}
	fmt.Printf("{\"port\":%d}\n", listener.Addr().(*net.TCPAddr).Port)
	// ServeTLS offers h2 and http/1.1 by ALPN, as the apiserver does.
	check(server.ServeTLS(listener, "", ""))
}

func neverAnswer(_ http.ResponseWriter, request *http.Request) {
	// The whole body is read: the request arrived, it is never answered.
	_, _ = io.Copy(io.Discard, request.Body)
	conn := request.Context().Value(connKey{}).(*tls.Conn)
	if strings.Contains(request.URL.Path, "/reset/") {
		raw := conn.NetConn().(*net.TCPConn)
		_ = raw.SetLinger(0) // close() sends a RST
		raw.Close()
	} else {
		conn.Close()
	}
	// Nothing is written: the connection is gone.
	time.Sleep(time.Second)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
