// A TLS server with Go's crypto/tls, the stack the kube-apiserver runs on, for
// tests of fresh connections: it reads one HTTP/1.1 request and never answers.
// A request whose path holds "/reset/" gets a TCP reset, any other a close
// (close_notify, then FIN). Go's TLS 1.3 server sends its session tickets
// before the client's Finished, so nothing but the close comes after the
// request: what the kernel sees of a real apiserver dropping a request.
//
// Usage: go-tls-server   (prints {"port":N} once listening on 127.0.0.1)
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	template := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	check(err)
	config := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	listener, err := tls.Listen("tcp", "127.0.0.1:0", config)
	check(err)
	fmt.Printf("{\"port\":%d}\n", listener.Addr().(*net.TCPAddr).Port)
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		go serve(conn.(*tls.Conn))
	}
}

func serve(conn *tls.Conn) {
	request, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		conn.Close()
		return
	}
	// The whole body is read: the request arrived, it is never answered.
	_, _ = io.Copy(io.Discard, request.Body)
	if strings.Contains(request.URL.Path, "/reset/") {
		raw := conn.NetConn().(*net.TCPConn)
		_ = raw.SetLinger(0) // close() sends a RST
		raw.Close()
		return
	}
	conn.Close()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
