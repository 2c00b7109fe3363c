module example.com/violating

go 1.22
