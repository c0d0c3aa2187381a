module lostwrite.dev/testbed/go-tls-server

go 1.19
