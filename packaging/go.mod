module github.com/vesta-cx/euterpe/packaging

go 1.26.8
