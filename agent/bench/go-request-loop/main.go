// The Go side of the request-cost bench (agent/bench/goRequestCost.ts).
//
//	go-request-loop server            an HTTP/2 (TLS) server on 127.0.0.1, answers 200; prints its port
//	go-request-loop client URL        one HTTP/2 connection (golang.org/x/net/http2, as client-go);
//	                                  each line "N" on stdin sends N status PATCHes one after the
//	                                  other and prints "CPU_NS WALL_NS" per request
//
// CPU time is the whole process's (getrusage): a uprobe's cost is charged to
// the thread that hit it, whichever thread the goroutine ran on.
package main

import (
	"bufio"
	"bytes"
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
	"strconv"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "server" {
		serve()
		return
	}
	if len(os.Args) >= 3 && os.Args[1] == "client" {
		loop(os.Args[2])
		return
	}
	fmt.Fprintln(os.Stderr, "usage: go-request-loop server | client URL")
	os.Exit(2)
}

func serve() {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	template := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, _ := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	server := &http2.Server{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"kind":"Widget"}`))
	})
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		go func() {
			// ServeConn checks the negotiated TLS state: finish the handshake first.
			if err := conn.(*tls.Conn).Handshake(); err != nil {
				conn.Close()
				return
			}
			server.ServeConn(conn, &http2.ServeConnOpts{Handler: handler})
		}()
	}
}

func cpuNs() int64 {
	var usage syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
	return usage.Utime.Nano() + usage.Stime.Nano()
}

func loop(url string) {
	client := &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	body := bytes.Repeat([]byte("x"), 100)
	send := func() {
		req, _ := http.NewRequest(http.MethodPatch, url, bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send() // the connection is open before any probe, as client-go's is
	fmt.Println("ready", os.Getpid())
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		n, err := strconv.Atoi(lines.Text())
		if err != nil || n < 1 {
			continue
		}
		cpu, wall := cpuNs(), time.Now()
		for i := 0; i < n; i++ {
			send()
		}
		fmt.Println((cpuNs()-cpu)/int64(n), time.Since(wall).Nanoseconds()/int64(n))
	}
}
