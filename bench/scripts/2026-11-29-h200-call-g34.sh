# Call g34: where attention's time goes at sixteen contexts (Nsight Compute on the kernels of
# kernel_check's attention bench), and PyTorch's flash attention on the same shape for scale.
set -u
chmod +x .gpu-bin/kernel_check
exec > >(tee $OUT/log.txt) 2>&1
cat > /tmp/sdpa.py <<'PY'
import torch, torch.nn.functional as F
torch.manual_seed(0)
B,H,T,D=16,8,1024,64
q,k,v=(torch.randn(B,H,T,D,device='cuda',dtype=torch.bfloat16,requires_grad=True) for _ in range(3))
g=torch.randn(B,H,T,D,device='cuda',dtype=torch.bfloat16)
def fwd(): return F.scaled_dot_product_attention(q,k,v,is_causal=True)
def fb():
    o=fwd(); o.backward(g)
for name,f in [("fwd",fwd),("fwd+bwd",fb)]:
    for _ in range(5): f()
    torch.cuda.synchronize()
    s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50): f()
    e.record(); torch.cuda.synchronize()
    us=s.elapsed_time(e)/50*1000
    fl=4*B*H*T*T*D/2*(1 if name=="fwd" else 3.5)
    print(f"torch sdpa {name}: {us:.1f} us  {fl/us/1e6:.1f} TFLOP/s")
print(torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled())
PY
timeout 120 python3 /tmp/sdpa.py
echo "== ncu"
chmod +x .gpu-bin/alpha
for kn in attention_mma_fwd_rotload attention_mma_bwd_rotload_rotary attention_mma_bwd_delta; do
  timeout 200 ncu --kernel-name $kn --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    .gpu-bin/alpha bench coppelius --device cuda --batch 16 --warmup 1 --steps 2 --baseline none > $OUT/ncu-$kn.txt 2>&1; echo "exit $?"
  grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Dynamic Shared|Static Shared|Grid Size|Eligible|No Eligible|Active Warps" $OUT/ncu-$kn.txt | head -40
done
