module lostwrite.dev/testbed/golayout

go 1.22
