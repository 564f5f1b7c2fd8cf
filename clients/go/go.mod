module dlockd.example/dlock

go 1.19
