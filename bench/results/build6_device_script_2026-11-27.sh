#!/bin/bash
# build6 device check: pool tests on triton 3.6, then first calls / training compile with worker
# processes and with the old thread path (SYMSHAPE_BUILD_PROCESSES=0), each from an empty Triton cache.
# NOTE: at the commit that ran (7f8ef74^) worker processes were the default and SYMSHAPE_BUILD_PROCESSES=0 chose threads; since 5c3d347 threads are the default and SYMSHAPE_BUILD_PROCESSES=1 chooses processes.
mkdir -p $OUT
S=$(date +%s)
el() { echo "[t+$(( $(date +%s) - S ))s] $*"; }
python -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__, 'cores', __import__('os').cpu_count())"
el "== pytest tests/test_build_pool.py"
timeout 60 python -m pytest tests/test_build_pool.py -x -q -p no:cacheprovider 2>&1 | tail -5
fresh() { export TRITON_CACHE_DIR=$(mktemp -d /tmp/tc_XXXX); export SYMSHAPE_CACHE=$(mktemp -d /tmp/sc_XXXX); }
el "== gpu_models processes"; fresh
timeout 70 python bench/gpu_models.py --quick --only gpt2,llama --modes eager,symshape,backend 2>$OUT/gpu_models_processes.err | tee $OUT/gpu_models_processes.txt | grep -v "^\["
el "== gpu_models threads"; fresh
SYMSHAPE_BUILD_PROCESSES=0 timeout 70 python bench/gpu_models.py --quick --only gpt2,llama --modes eager,symshape,backend 2>$OUT/gpu_models_threads.err | tee $OUT/gpu_models_threads.txt | grep -v "^\["
el "== train_compare processes"; fresh
timeout 100 python bench/train_compare.py --device cuda --models gpt2 --dtypes bf16 --modes symshape,ind_dyn_nocudnn --isolate --steps 10 2>&1 | tee $OUT/train_processes.txt | grep -i "compile" | tail -4
el "== train_compare threads (symshape only)"; fresh
SYMSHAPE_BUILD_PROCESSES=0 timeout 55 python bench/train_compare.py --device cuda --models gpt2 --dtypes bf16 --modes symshape --isolate --steps 10 2>&1 | tee $OUT/train_threads.txt | grep -i "compile" | tail -3
el "== build_bench"; unset TRITON_CACHE_DIR
timeout 45 python bench/build_bench.py --models gpt2 --dtype fp16 2>&1 | grep -v -i warn | tee $OUT/build_bench.txt
el "== cpp_build_bench"
timeout 40 python bench/cpp_build_bench.py --jobs 1,4,16 --repeat 1 2>&1 | grep -v -i warn | tail -4 | tee $OUT/cpp_build_bench.txt
el done
