# Call g84 (default build, every launch as ed1b0d3's): Nsight Compute on four of sixteen
# contexts' products, one launch each inside the step's graph (clocks left alone): the q/k/v
# projection's turned heads store, the gated launch, the attention output's residual add and
# the logits. Speed of light, tensor-pipe use, stall reasons, memory throughput: where the
# products' time goes next to cuBLAS's (the PyTorch profile, g81).
set -u
chmod +x .gpu-bin/alpha
exec > >(tee $OUT/log.txt) 2>&1
A=.gpu-bin/alpha
prof() { local name=$1; local re=$2; local skip=$3
  timeout 150 ncu --clock-control none --graph-profiling node -k "regex:$re" --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    $A bench coppelius --device cuda --batch 16 --warmup 1 --steps 1 --baseline none > $OUT/ncu-$name.txt 2>&1; echo "$name exit $?"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Theoretical Occupancy|==PROF==|error" $OUT/ncu-$name.txt | head -16
  grep -E "^ +(Stall|.*stall)" $OUT/ncu-$name.txt | head -5; }
prof heads "gemm_rr_bf16_store_heads_b16t1024h8d64_bf16rot" 2
prof gated "storemul_gelu_tma_s3_gated" 2
prof add "^gemm_rr_bf16_add_tma_s3$" 4
prof logits "^gemm_rc_bf16_store_tma_s3_rows$" 0
