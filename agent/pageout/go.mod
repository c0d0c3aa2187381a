module lostwrite/pageout

go 1.19
