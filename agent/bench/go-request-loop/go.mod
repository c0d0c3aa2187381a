module lostwrite.dev/bench/gorequestloop

go 1.19

require golang.org/x/net v0.7.0

require golang.org/x/text v0.7.0 // indirect
