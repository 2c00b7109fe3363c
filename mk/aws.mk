# AWS ENI backend: benchmark against the EC2 fake (test/ec2fake), and the plugin binary.
#
#   make bench-eni        1,000 nodes x 30 addresses against the fake throttling like AWS
#                         (ALLOT_BENCH_ENI_NODES, ALLOT_BENCH_ENI_SCALE to change size and clock)
#   make aws-eni-plugin   build the go-plugin process serving the backend (bin/aws-eni)

.PHONY: bench-eni aws-eni-plugin

bench-eni:
	@mkdir -p $(ALLOT_CACHE)
	$(GO) test -run '^$$' -bench BenchmarkENIConverge -benchtime 1x -timeout 30m ./plugins/cloud/awseni/ | tee $(ALLOT_CACHE)/bench-eni.txt | grep -vE '^(goos|goarch|pkg|cpu|PASS|ok|Benchmark)'

aws-eni-plugin:
	$(GO) build -o $(BIN)/aws-eni ./plugins/cloud/awseni/cmd
