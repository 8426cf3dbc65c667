#!/usr/bin/env bash
# Steps for one run on a GPU machine that holds a copy of the repository and the wheels it needs in
# .whl/: install the wheels, then run the named steps in order, logging under $OUT.
#   bash scripts/gpu_steps.sh info tests sweep-one bench-few
# XDIST=8 runs the GPU tests in 8 processes (pytest-xdist among the wheels): nvcc compiles dominate.
# `deploy` runs shipped kernels as a machine without a compiler does (docs/deploy.md): no PyCUDA, no
# nvcc on PATH, an empty kernel cache; its test file and the first-call benchmark write to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/autotune-out}
mkdir -p "$OUT"
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export AUTOTUNE_CACHE_DIR=${AUTOTUNE_CACHE_DIR:-/tmp/autotune-cache}
# The database stays on the device machine ($OUT brings back only small files, at most 8); the
# `export` step writes its top trials per problem to $OUT/records.jsonl.
DB=${DB:-/tmp/autotune-tuning.db}
TRIALS=${TRIALS:-64}

step() { echo "=== $1 ($(date +%T))"; }
# sweep LOG LINES ARGS...: `autotune sweep ARGS` on $DB, logged to $OUT/LOG.log (appended: $OUT brings
# back at most 8 files), its last LINES shown.
sweep() {
  local log=$1 lines=$2
  shift 2
  python3 -m autotune sweep "$@" --db "$DB" 2>&1 | tee -a "$OUT/$log.log" | tail -"$lines"
}
for name in "$@"; do
  case "$name" in
    info)
      step info
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
      nvcc --version | tail -2
      python3 -c "import pycuda, optuna, sqlalchemy, typer, torch; print('pycuda', pycuda.VERSION, 'optuna', optuna.__version__, 'sqlalchemy', sqlalchemy.__version__, 'typer', typer.__version__, 'torch', torch.__version__)" ;;
    tests)
      step tests
      python3 -m pytest -m gpu -q -p no:cacheprovider --durations=15 ${XDIST:+-n $XDIST} ${TESTS:-} 2>&1 | tee "$OUT/gpu-tests.log" | tail -25 ;;
    sweep-one)
      step sweep-one
      # Timed: /usr/bin/time runs programs, not shell functions, hence the command in full.
      /usr/bin/time -f "sweep wall %e s" python3 -m autotune sweep --op hgemv --m 4096 --n 8192 --trials "$TRIALS" --db "$DB" 2>&1 | tee "$OUT/sweep-one.log" | tail -8 ;;
    sweep-all)
      for op in ${OPS:-hgemv bgemv sgemv}; do
        step "sweep-all $op"
        sweep sweep-$op 24 --op "$op" --trials "$TRIALS" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    sweep-shapes)
      # Some shapes only: SHAPES="256 131072;1024 65536" (rows separated by ';').
      tr ';' '\n' <<< "${SHAPES:?set SHAPES}" > /tmp/shapes.txt
      for op in ${OPS:-hgemv bgemv sgemv}; do
        step "sweep-shapes $op"
        sweep sweep-shapes-$op 6 --op "$op" --shapes /tmp/shapes.txt --trials "$TRIALS" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    sweep-stale)
      # After a kernel edit: every stored problem (the shipped records included) without a measurement
      # of today's kernel source, re-tuned, for OPS (default: all six). Then `export`, and on the
      # development machine `scripts/merge_records.py records.jsonl --replace-stale`.
      for op in ${OPS:-sgemv hgemv bgemv sgemm hgemm bgemm}; do
        step "sweep-stale $op"
        sweep sweep-stale-$op 40 --op "$op" --stale --trials "${GEMM_TRIALS:-40}" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    confirm)
      # A budget the shipped records already fill: nothing new is tuned, each problem's leaders are
      # measured again on this machine's fresh buffers (autotune/tune/confirm.py).
      for op in ${OPS:-hgemv bgemv sgemv}; do
        step "confirm $op"
        sweep confirm-$op 22 --op "$op" --trials 3
      done ;;
    ncu-gemv)
      step ncu-gemv
      ncu --clock-control none --launch-count ${NCU_LAUNCHES:-48} --metrics gpu__time_duration.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sectors_srcunit_tex_op_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,\
sm__warps_active.avg.pct_of_peak_sustained_active python3 scripts/profile_vs_cublas.py gemv > "$OUT/ncu-gemv.txt" 2>&1
      grep -E "^  [a-zA-Z_]|gpu__time|dram__|lts__|launch__grid|launch__regi|sm__warps" "$OUT/ncu-gemv.txt" | head -400 | tail -120 ;;
    sweep-few)
      step sweep-few
      printf '4096 8192\n1024 1024\n2048 2048\n256 131072\n131072 256\n57344 8192\n' > /tmp/few.txt
      sweep sweep-few 14 --op hgemv --shapes /tmp/few.txt --trials "$TRIALS" ;;
    bench-few)
      step bench-few
      printf '4096 8192\n1024 1024\n2048 2048\n256 131072\n131072 256\n57344 8192\n' > /tmp/few.txt
      python3 scripts/bench_gemv.py --db "$DB" --out "$OUT" --dtypes float16 --shapes /tmp/few.txt 2>&1 | tee "$OUT/bench-few.log" | tail -12 ;;
    bench)
      step bench
      python3 scripts/bench_gemv.py --db "$DB" --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -62 ;;
    faults)
      step faults
      python3 scripts/fault_drill.py --out "$OUT" 2>&1 | tee "$OUT/faults.log" | tail -12 ;;
    tuning)
      step tuning
      python3 scripts/bench_tuning.py --out "$OUT" ${ONLY:+--only $ONLY} ${MERGE:+--merge $MERGE} 2>&1 | tee "$OUT/tuning.log" | tail -20 ;;
    tests-gemm)
      step tests-gemm
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm.py 2>&1 | tee "$OUT/gpu-tests-gemm.log" | tail -25 ;;
    sweep-gemm)
      printf '4096 4096 4096\n8192 8192 8192\n' > /tmp/square.txt
      step "sweep-gemm sgemm"
      sweep sweep-sgemm 6 --op sgemm --shapes /tmp/square.txt --trials "${GEMM_TRIALS:-40}"
      step "sweep-gemm hgemm"
      sweep sweep-hgemm 22 --op hgemm --trials "${GEMM_TRIALS:-40}" ;;
    ws)
      # The ws GEMM family (issue 58, not yet picked by gemm.family): its GPU tests, then the GEMMs of
      # WS_SHAPES ('M N K' rows separated by ';'; default the squares) in float16 and bfloat16, both layouts,
      # swept (on DEVICES, e.g. 'all') and benchmarked beside cuBLAS with the family named
      # (AUTOTUNE_GEMM_FAMILY=ws: the worker inherits it; its records carry ws's source hash), in a
      # database of their own without the shipped records (whose GEMM configs are the wgmma family's).
      step ws
      python3 -m pytest -m gpu -q -p no:cacheprovider ${XDIST:+-n $XDIST} tests/test_gemm_ws.py 2>&1 | tee "$OUT/ws-tests.log" | tail -8
      tr ';' '\n' <<< "${WS_SHAPES:-4096 4096 4096;8192 8192 8192}" > /tmp/ws-shapes.txt
      (
        export AUTOTUNE_GEMM_FAMILY=ws DB=/tmp/autotune-ws.db
        rm -f "$DB"
        for op in hgemm bgemm; do
          for layout in "" --trans; do
            step "ws sweep $op $layout"
            sweep sweep-ws 6 --no-shipped --op $op --shapes /tmp/ws-shapes.txt $layout --trials "${GEMM_TRIALS:-24}" \
              ${DEVICES:+--devices $DEVICES}
          done
        done
        for layout in "" --trans; do
          python3 scripts/bench_gemm.py --db "$DB" --out "$OUT/ws$layout" --shapes /tmp/ws-shapes.txt \
            --dtypes float16 bfloat16 --skinny-dtypes float16 $layout 2>&1 | tee -a "$OUT/ws-bench.log" | tail -24
        done
      ) ;;
    sweep-skinny)
      # The half-precision skinny goal shapes (M <= 16): tensor cores for M >= 2, the CUDA-core
      # family (the transposed GEMV's) for M = 1.
      awk '$1 <= 16' autotune/ops/gemm/shapes.txt > /tmp/skinny.txt
      step "sweep-skinny hgemm ($(wc -l < /tmp/skinny.txt) shapes)"
      sweep sweep-skinny 16 --op hgemm --shapes /tmp/skinny.txt --trials "${GEMM_TRIALS:-40}" ;;
    bench-gemm)
      step bench-gemm
      python3 scripts/bench_gemm.py --db "$DB" --out "$OUT" 2>&1 | tee "$OUT/bench-gemm.log" | tail -24 ;;
    bench-gemm-nt)
      step bench-gemm-nt
      # The standard GEMM shapes and the decoder stack's batch-4 projections, as sweep-nt tunes them.
      { cat autotune/ops/gemm/shapes.txt; printf '4 6144 4096\n4 28672 4096\n4 4096 14336\n'; } \
        | grep -v '^#' | awk 'NF >= 3' > /tmp/nt-bench.txt
      python3 scripts/bench_gemm.py --trans --shapes /tmp/nt-bench.txt --db "$DB" --out "$OUT" 2>&1 \
        | tee "$OUT/bench-gemm-nt.log" | tail -28 ;;
    sweep-trans)
      for op in ${TRANS_OPS:-hgemv bgemv sgemv}; do
        step "sweep-trans $op"
        sweep sweep-trans-$op 22 --op "$op" --trans --trials "$TRIALS" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    sweep-nt)
      # GEMM with B stored N x K (nn.Linear's weight): the standard GEMM shapes and the decoder
      # stack's batch-4 projections (scripts/bench_linear.py), float16; NT_SHAPES="4 6144 4096;..."
      # tunes those rows only.
      if [ -n "${NT_SHAPES:-}" ]; then
        tr ';' '\n' <<< "$NT_SHAPES" > /tmp/nt.txt
      else
        { cat autotune/ops/gemm/shapes.txt; printf '4 6144 4096\n4 28672 4096\n4 4096 14336\n'; } \
          | grep -v '^#' | awk 'NF >= 3' > /tmp/nt.txt
      fi
      step "sweep-nt hgemm ($(wc -l < /tmp/nt.txt) shapes)"
      sweep sweep-nt 24 --op hgemm --trans --shapes /tmp/nt.txt --trials "${GEMM_TRIALS:-40}" ${PATIENCE:+--patience $PATIENCE} ;;
    sweep-llm)
      # Issue 30's GEMM coverage set (autotune/ops/gemm/llm_shapes.txt: M 2..4096 x the Llama-3-8B and
      # Qwen2-7B projections, B stored N x K) on every GPU at once, one op after another
      # (LLM_OPS="hgemm bgemm sgemm"); LLM_M="2 8" keeps those rows only. Export after it.
      awk -v keep="${LLM_M:-}" 'BEGIN { n = split(keep, m, " "); for (i = 1; i <= n; i++) want[m[i]] = 1 }
        /^#/ || NF < 3 { next } n == 0 || ($1 in want)' autotune/ops/gemm/llm_shapes.txt > /tmp/llm.txt
      for op in ${LLM_OPS:-hgemm bgemm sgemm}; do
        step "sweep-llm $op ($(wc -l < /tmp/llm.txt) shapes)"
        sweep sweep-llm-$op 12 --op "$op" --trans --shapes /tmp/llm.txt --devices all \
          --trials "${GEMM_TRIALS:-40}" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    sweep-llm-gemv)
      # Open models' decode GEMVs beyond the standard set (autotune/ops/gemv/llm_shapes.txt), both layouts,
      # on every GPU at once, one op after another (OPS="hgemv bgemv sgemv"). Export after it.
      for op in ${OPS:-hgemv bgemv sgemv}; do
        for layout in "" --trans; do
          step "sweep-llm-gemv $op $layout"
          sweep sweep-llm-gemv 4 --op "$op" $layout --shapes autotune/ops/gemv/llm_shapes.txt --devices all \
            --trials "$TRIALS" ${PATIENCE:+--patience $PATIENCE}
        done
      done ;;
    bench-llm-gemv)
      # Their benchmark beside cuBLAS: gemv_llm_<gpu>.json and gemv_llm_trans_<gpu>.json. With RESUME=1 the
      # reports in results/ (a run that an earlier call cut short, committed) are carried on: only the
      # shapes they lack are timed.
      for layout in "" --trans; do
        step "bench-llm-gemv $layout"
        resume=""
        if [ "${RESUME:-0}" = 1 ]; then resume=--resume; cp results/gemv_llm${layout:+_trans}_*.json "$OUT/" 2>/dev/null; fi
        python3 scripts/bench_gemv.py --set llm $layout $resume --db "$DB" --out "$OUT" 2>&1 \
          | tee -a "$OUT/bench-llm.log" | tail -3
      done ;;
    sweep-edge)
      # Issue 30's edge shapes (autotune/ops/gemv/edge_shapes.txt, autotune/ops/gemm/edge_shapes.txt)
      # in three dtypes and both layouts, and the standard GEMM set in bfloat16 and float32 (K x N),
      # on every GPU at once; the N x K rows the LLM set already holds are left out. EDGE_DEADLINE_S
      # (default 470) starts no job after that many seconds, so that the export after it still runs.
      grep -v '^#' autotune/ops/gemv/edge_shapes.txt | awk 'NF >= 2' > /tmp/edge-gemv.txt
      grep -v '^#' autotune/ops/gemm/edge_shapes.txt | awk 'NF >= 3' > /tmp/edge-gemm.txt
      awk 'NR == FNR { if (!/^#/ && NF >= 3) seen[$1 " " $2 " " $3] = 1; next } !(($1 " " $2 " " $3) in seen)' \
        autotune/ops/gemm/llm_shapes.txt /tmp/edge-gemm.txt > /tmp/edge-gemm-nk.txt
      # The float32 K x N squares ship already.
      grep -v '^#' autotune/ops/gemm/shapes.txt | awk 'NF >= 3 && $1 <= 16' > /tmp/std-skinny.txt
      grep -v '^#' autotune/ops/gemm/shapes.txt | awk 'NF >= 3' > /tmp/std-gemm.txt
      jobs=("sgemm:/tmp/std-skinny.txt:")
      for op in hgemm bgemm sgemm; do jobs+=("$op:/tmp/edge-gemm.txt:" "$op:/tmp/edge-gemm-nk.txt:--trans"); done
      for op in hgemv bgemv sgemv; do jobs+=("$op:/tmp/edge-gemv.txt:" "$op:/tmp/edge-gemv.txt:--trans"); done
      jobs+=("bgemm:/tmp/std-gemm.txt:")
      start=$SECONDS
      for job in "${jobs[@]}"; do
        IFS=: read -r op shapes trans <<< "$job"
        if (( SECONDS - start > ${EDGE_DEADLINE_S:-470} )); then echo "past the deadline: $job not started"; continue; fi
        step "sweep-edge $op $trans ($(wc -l < "$shapes") shapes)"
        sweep sweep-edge 2 --op "$op" $trans --shapes "$shapes" --devices all \
          --trials "${GEMM_TRIALS:-40}" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    linear)
      # A Llama-3-8B-wide decoder stack with F.linear against autotune.linear (docs/linear.md).
      step linear
      python3 scripts/bench_linear.py --out "$OUT" 2>&1 | tee "$OUT/linear.log" | tail -8 ;;
    untuned)
      # Shapes no tuned config fits: the selector's fitted config beside the default and cuBLAS, and
      # with UNTUNED_TRIALS set, beside the best of a sweep of that many trials of each shape too.
      step untuned
      python3 scripts/bench_untuned.py --db "$DB" --out "$OUT" ${UNTUNED_TRIALS:+--trials $UNTUNED_TRIALS} 2>&1 \
        | tee "$OUT/untuned.log" | tail -40 ;;
    bench-trans)
      step bench-trans
      python3 scripts/bench_gemv.py --trans --db "$DB" --out "$OUT" 2>&1 | tee "$OUT/bench-trans.log" | tail -62 ;;
    decode)
      # The launch path's decode steps beside torch.mv, eager and in CUDA graphs (docs/launch.md).
      step decode
      python3 scripts/bench_decode.py --out "$OUT" 2>&1 | tee "$OUT/decode.log" | tail -12 ;;
    retime)
      # After a kernel edit that changes every instance: each stale problem's earlier best re-timed,
      # re-swept only where 2% slower (autotune sweep --retime). IMPORT=records.jsonl first loads a
      # records file an earlier, cut-short run exported, so that its problems count as done.
      [ -n "${IMPORT:-}" ] && python3 -m autotune import "$IMPORT" --db "$DB" | tail -1
      for op in ${OPS:-hgemv bgemv sgemv}; do
        step "retime $op"
        sweep retime-$op 8 --op "$op" --retime ${RETIME_ARGS:-} --trials "$TRIALS" ${PATIENCE:+--patience $PATIENCE}
      done ;;
    retime-shipped)
      # The shipped GEMV and GEMM records' best configs timed again through this tree's worker
      # (scripts/retime_shipped.py). OLD_TREE=old.tar (git archive REV autotune kernels) times them
      # through that tree's worker first, then this one's, and compares: a worker change alone.
      step retime-shipped
      if [ -n "${OLD_TREE:-}" ]; then
        rm -rf /tmp/old-tree && mkdir -p /tmp/old-tree && tar -xf "$OLD_TREE" -C /tmp/old-tree
        PYTHONPATH=/tmp/site:/tmp/old-tree python3 scripts/retime_shipped.py --out "$OUT" --label old ${RETIME_SHIPPED_ARGS:-} | tail -1
      fi
      python3 scripts/retime_shipped.py --out "$OUT" --label new ${RETIME_SHIPPED_ARGS:-} | tail -1
      [ -n "${OLD_TREE:-}" ] && python3 scripts/retime_shipped.py --compare "$OUT/retime_new.json" "$OUT/retime_old.json" ;;
    two-gpus)
      # A machine with two or more GPUs: tensors on each GPU, and one sweep over all of them.
      step two-gpus
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_devices.py \
        tests/test_gpu_launch.py::test_tensors_on_each_gpu_run_there_concurrently 2>&1 | tee "$OUT/gpu-tests-two.log" | tail -8 ;;
    bench-devices)
      # That sweep's wall time against the same sweep on one GPU (results/devices_<gpu>.json).
      step bench-devices
      python3 scripts/bench_devices.py --out "$OUT" 2>&1 | tee "$OUT/devices.log" | tail -6 ;;
    deploy)
      step deploy
      # Every wheel but PyCUDA's and what only PyCUDA needs (and the cuda extra's nvidia-ml-py), in a
      # folder of its own; torch and numpy come from the system environment, autotune from this checkout.
      site=/tmp/site-deploy
      rm -rf "$site" && mkdir -p "$site"
      wheels=$(ls .whl/*.whl | grep -Ev '/(pycuda|pytools|siphash24|nvidia_ml_py|autotune_kernels)-')
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" $wheels || exit 1
      py=$(command -v python3)  # absolute, links kept: a virtual environment is found from its bin/
      bin=/tmp/deploy-bin  # /usr/bin and /bin without nvcc, should a toolkit live there
      rm -rf "$bin" && mkdir -p "$bin"
      for tool in /usr/bin/* /bin/*; do
        case "${tool##*/}" in nvcc*) ;; *) ln -sf "$tool" "$bin/${tool##*/}" 2>/dev/null ;; esac
      done
      deploy_env=(env PATH="$bin" PYTHONPATH="$site:$PWD" AUTOTUNE_DEPLOY_CHECK=1
        AUTOTUNE_CACHE_DIR="$(mktemp -d /tmp/deploy-cache.XXXX)" XDG_DATA_HOME="$(mktemp -d /tmp/deploy-data.XXXX)")
      "${deploy_env[@]}" "$py" -c "import importlib.util as u, shutil, sys, torch, autotune; print('python', sys.version.split()[0], 'torch', torch.__version__, 'nvcc', shutil.which('nvcc'), 'pycuda', u.find_spec('pycuda'))"
      "${deploy_env[@]}" "$py" -m pytest -q -p no:cacheprovider -rs tests/test_gpu_deploy.py 2>&1 | tee "$OUT/deploy-tests.log" | tail -15
      "$py" experiments/host_launch.py  # the host's speed, which the first call's medians move with
      "${deploy_env[@]}" "$py" scripts/bench_first_call.py --out "$OUT" ${REPEATS:+--repeats $REPEATS} ${PROFILE:+--profile} 2>&1 | tee "$OUT/first-call.log" | tail -12 ;;
    first-call)
      # The same benchmark where PyCUDA and nvcc are installed (tuning's environment).
      step first-call
      python3 scripts/bench_first_call.py --out "$OUT/with-toolkit" ${REPEATS:+--repeats $REPEATS} 2>&1 | tee "$OUT/first-call-toolkit.log" | tail -12 ;;
    select)
      # The selector on shapes no record covers (scripts/bench_select.py): its pick beside cuBLAS and the
      # best of a SELECT_TRIALS-trial sweep of each shape. SELECT_GPUS processes at once, one a GPU;
      # SELECT_ONLY='gemv/*' runs those ids; SELECT_ARGS="--resume results/select_state.json" goes on
      # with an earlier call's rows ($OUT/select_state.json, kept after every shape).
      step select
      # set -f: the ids' patterns reach the script unexpanded by the shell.
      (set -f; python3 scripts/bench_select.py --out "$OUT" --gpus "${SELECT_GPUS:-1}" --trials "${SELECT_TRIALS:-40}" \
        ${SELECT_ONLY:+--only $SELECT_ONLY} ${SELECT_ARGS:-}) 2>&1 | tee "$OUT/select.log" | tail -70 ;;
    kernel-tuner)
      # Tuning speed beside Kernel Tuner (scripts/bench_tuning_vs_kernel_tuner.py): Kernel Tuner and what
      # it needs beyond the image's packages (.whl/kt/) go into /tmp/site too. KT_GPUS runs at once, one a
      # GPU; KT_ARGS="--resume results/tuning_vs_kernel_tuner_runs.json" goes on with an earlier call's set.
      step kernel-tuner
      # No --upgrade: pip would replace /tmp/site/bin, which the first install filled, with theirs.
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/kt/*.whl || exit 1
      python3 scripts/bench_tuning_vs_kernel_tuner.py --out "$OUT" --gpus "${KT_GPUS:-1}" ${KT_ARGS:-} 2>&1 \
        | tee "$OUT/kernel-tuner.log" | tail -40 ;;
    sweep-int4)
      # The int4 op's standard shapes (autotune/ops/qgemm/shapes.txt) at the M of INT4_M (default "1 4 16"),
      # for each INT4_CASES entry OP:VARIANT (default "hqgemm:g128 hqgemm:g128a bqgemm:g128"), on the GPUs of
      # DEVICES ("all": one sweep process a GPU) or GPU 0. Export after it.
      awk -v keep="${INT4_M:-1 4 16}" 'BEGIN { n = split(keep, m, " "); for (i = 1; i <= n; i++) want[m[i]] = 1 }
        /^#/ || NF < 3 { next } ($1 in want)' autotune/ops/qgemm/shapes.txt > /tmp/int4.txt
      for case in ${INT4_CASES:-hqgemm:g128 hqgemm:g128a bqgemm:g128}; do
        step "sweep-int4 $case ($(wc -l < /tmp/int4.txt) shapes)"
        sweep sweep-int4 20 --op "${case%%:*}" --variant "${case##*:}" --shapes /tmp/int4.txt \
          --trials "${INT4_TRIALS:-24}" ${PATIENCE:+--patience $PATIENCE} ${DEVICES:+--devices $DEVICES}
      done ;;
    qdequant)
      # The int4 dequantization op (autotune/ops/qdequant, what a linear of more than 64 rows needs): its
      # GPU tests, then its standard shapes swept in each tuned kind (every config: 27). Export after it.
      step qdequant
      python3 -m pytest -m gpu -q -p no:cacheprovider ${XDIST:+-n $XDIST} tests/test_gpu_qdequant.py 2>&1 \
        | tee "$OUT/qdequant-tests.log" | tail -5
      for case in hqdequant:g128 hqdequant:g128a bqdequant:g128; do
        step "sweep-qdequant $case"
        sweep sweep-qdequant 10 --op "${case%%:*}" --variant "${case##*:}" --trials 27
      done ;;
    bench-int4)
      # scripts/bench_lowbit.py on the tuned database: BENCH_INT4_ARGS adds its options ("--m 1 --merge").
      # gemlite's autotuned configs start from results/gemlite_configs_<gpu>.json and come back in
      # $OUT with this run's added (its most thorough autotune takes minutes a shape): commit them.
      step bench-int4
      gpu=$(python3 -c "from autotune.core.fingerprint import slugify; import sys; print(slugify(sys.argv[1]))" \
        "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")
      [ -f "results/gemlite_configs_$gpu.json" ] && cp "results/gemlite_configs_$gpu.json" "$OUT/"
      [ -f "results/lowbit_$gpu.json" ] && [ ! -f "$OUT/lowbit_$gpu.json" ] && cp "results/lowbit_$gpu.json" "$OUT/"
      configs=gemlite_configs_$gpu.json
      AUTOTUNE_DB="$DB" python3 scripts/bench_lowbit.py --out "$OUT" --gemlite-configs "$OUT/$configs" ${BENCH_INT4_ARGS:-} 2>&1 | grep -v '^{' | tee "$OUT/bench-int4.log" | tail -16 ;;
    ncu-int4)
      # Nsight Compute on the int4 op on 28672x4096 (g128, float16) as autotune.linear runs it, for each
      # M of NCU_M (default 1): the full set of sections, then where its warps wait by SASS instruction
      # (scripts/ncu_stalls.py), in $OUT/ncu-int4-m<M>.txt.
      for m in ${NCU_M:-1}; do
        step "ncu-int4 M = $m"
        ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:qgemm --set full --import-source yes \
          -f -o /tmp/ncu-int4 env AUTOTUNE_DB="$DB" python3 -c "
import torch, autotune
w = torch.randn(28672, 4096, device='cuda', dtype=torch.float16)
qw = autotune.quantize(w, 'int4', group=128)
x = torch.randn($m, 4096, device='cuda', dtype=torch.float16)
for _ in range(6): autotune.linear(x, qw)
torch.cuda.synchronize()" > /tmp/ncu-int4.log 2>&1 || tail -5 /tmp/ncu-int4.log
        { ncu -i /tmp/ncu-int4.ncu-rep --page details
          ncu -i /tmp/ncu-int4.ncu-rep --page source --csv --print-source sass > /tmp/ncu-int4-source.csv
          python3 scripts/ncu_stalls.py /tmp/ncu-int4-source.csv; } > "$OUT/ncu-int4-m$m.txt" 2>&1
        grep -E "qgemm|Duration|DRAM Throughput|Registers Per|Eligible Warps|Issue Slots Busy|samples$" \
          "$OUT/ncu-int4-m$m.txt" | head -12
      done ;;
    int4-probes)
      # The int4 GEMV's probes (docs/lowbit.md): the read-only access pattern probe, and the cp.async and
      # cp.async.bulk kernels checked and timed beside qgemm's swept instances.
      step int4-probes
      nvcc -O3 -arch=sm_90 -o /tmp/int4_access experiments/int4_access/access.cu && /tmp/int4_access > "$OUT/int4_access.jsonl"
      nvcc -O3 -arch=sm_90 -std=c++17 -I kernels -I kernels/common -o /tmp/int4_async experiments/int4_async.cu \
        && /tmp/int4_async | tee "$OUT/int4_async.jsonl" | tail -40 ;;
    trans-probes)
      # The transposed GEMV's stages brought in by the TMA, read by the tensor cores (gemv_t_tma_mma.cu) and
      # by CUDA cores (gemv_t_tma.cu), each beside narrow's picks (docs/findings.md, transposed GEMV).
      for probe in gemv_t_tma_mma gemv_t_tma; do
        step "trans-probes $probe"
        nvcc -O3 -arch=sm_90 -I kernels -I kernels/common -I experiments -o "/tmp/$probe" "experiments/$probe.cu" \
          && timeout 200 "/tmp/$probe" | tee "$OUT/$probe.txt"
      done ;;
    int4-wgmma)
      # The int4 skinny GEMM on wgmma (experiments/int4_wgmma.cu) beside cuBLAS: PROBE_QUICK=1 for M 16 and 64 only.
      step int4-wgmma
      nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels/common -o /tmp/int4_wgmma \
        experiments/int4_wgmma.cu -lcublas && /tmp/int4_wgmma > "$OUT/int4_wgmma.jsonl"
      grep -c '"us"' "$OUT/int4_wgmma.jsonl" ;;
    host-int4)
      # Where an int4 call's host time goes: autotune.linear of each x shape beside F.linear and the
      # float16 GEMV, and its profile.
      step host-int4
      python3 experiments/host_cost_linear.py --int4 2>&1 | tee "$OUT/host-int4.txt" | head -8 ;;
    host-model)
      # Where eager generate's host time goes, torch's Llama beside the patched one (cProfile).
      step host-model
      python3 experiments/host_cost_linear.py --model 2>&1 | grep -v Warning > "$OUT/host-model.txt"
      grep -E "^=== |function calls" "$OUT/host-model.txt" ;;
    export)
      step export
      python3 -c "import sys; from pathlib import Path; from autotune.store import open_store; print(open_store(sys.argv[1], import_shipped=False).export_records('$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)', Path(sys.argv[2]), top=3, current_only=True), 'records')" "$DB" "$OUT/records.jsonl" ;;
    linear-grad)
      # A training step's linear, forward and backward, beside F.linear (scripts/bench_linear_grad.py).
      step linear-grad
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_linear_grad.py 2>&1 | tee "$OUT/linear-grad-tests.log" | tail -8
      python3 scripts/bench_linear_grad.py --out "$OUT" ${PROFILE:+--profile} 2>&1 | tee "$OUT/linear-grad.log" | tail -14 ;;
    model)
      # A transformers Llama decode, torch against autotune.patch(model) (scripts/bench_model.py):
      # MODEL_ARGS="--layers 8" for a shorter run.
      step model
      [ "${PATCH_TESTS:-1}" = 1 ] && python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_patch.py 2>&1 | tee "$OUT/patch-tests.log" | tail -8
      python3 scripts/bench_model.py --out "$OUT" ${MODEL_ARGS:-} 2>&1 | tee "$OUT/model.log" | grep -v Warning | tail -14 ;;
    tune-model)
      # autotune.tune_model on a model of shapes never tuned (scripts/bench_tune_model.py).
      step tune-model
      python3 scripts/bench_tune_model.py --out "$OUT" 2>&1 | tee "$OUT/tune-model.log" | grep -v Warning | tail -30 ;;
    quick-start)
      # The README's first Quick start command as a newcomer runs it here: a new virtual environment
      # (seeing the system's torch, numpy and typer, as a CUDA image has them), pip offline from .whl/
      # and .whl/fresh/ (hatchling and what the package needs that the image lacks, fetched beforehand:
      # pip download -d .whl/fresh --python-version 3.12 --only-binary=:all: hatchling nvidia-ml-py)
      # in place of PyPI, new data and cache folders, nothing of this script's PYTHONPATH. QUICK_LIMIT
      # seconds at most.
      step quick-start
      venv=/tmp/quick-venv home=$(mktemp -d /tmp/quick-home.XXXX)
      rm -rf "$venv" && python3 -m venv "$venv"
      # The image's Python is itself a virtual environment, whose packages --system-site-packages
      # would not show: a .pth file adds its site-packages after the new environment's own.
      python3 -c "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))" \
        > "$(echo "$venv"/lib/python3*/site-packages)/image.pth"
      (
        unset PYTHONPATH AUTOTUNE_CACHE_DIR AUTOTUNE_DB
        export PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl $PWD/.whl/fresh" XDG_DATA_HOME="$home/data" XDG_CACHE_HOME="$home/cache"
        . "$venv/bin/activate"
        /usr/bin/time -f "quick start wall %e s" timeout "${QUICK_LIMIT:-480}" \
          bash -c "pip install '.[cuda]' && autotune sweep --op hgemv"
        echo "exit $?"
        autotune best --m 4096 --n 8192
      ) 2>&1 | tee "$OUT/quick-start.log" | grep -v "^\s*$" | tail -30 ;;
    *) echo "unknown step $name"; exit 2 ;;
  esac
done
step done
