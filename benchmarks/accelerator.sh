#!/usr/bin/env bash
# The accelerator measurements in one go: doctor, the FDM and particle benchmarks, and the
# CPU-vs-accelerator notebook, all written under OUT_DIR (default benchmarks/results/accel).
#   bash benchmarks/accelerator.sh [OUT_DIR] [PART...]
#   PART: doctor fdm fdm-batch particles tuning notebook torch_path crossover
#         (default: all but tuning)
#   crossover writes OUT_DIR/crossover.json: copy it to mfgwork/data/crossover.json to ship it
#   PARTICLES_ARGS: extra arguments of benchmarks/particles.py, e.g. "--numpy-max 1e6"
set -uo pipefail
out="${1:-benchmarks/results/accel}"
shift || true
parts="${*:-doctor fdm fdm-batch particles notebook torch_path crossover}"
mkdir -p "$out"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
for part in $parts; do
    echo "=== $part ==="
    case "$part" in
        doctor) $py -m mfgwork doctor --json > "$out/doctor.json"
                $py -c "import json, sys; from mfgwork.apps.doctor import format_report; \
print(format_report(json.load(open(sys.argv[1]))))" "$out/doctor.json" ;;
        fdm) $py benchmarks/fdm.py --repeats "${FDM_REPEATS:-3}" --batch "${FDM_BATCH:-256}" \
                --targets "${FDM_TARGETS:-numpy,torch-cuda,torch-cuda-f32,torch-cuda-compiled}" \
                --out "$out/fdm.json" ;;
        fdm-batch) $py benchmarks/fdm_batch.py ${FDM_BATCH_ARGS:-} --out "$out/fdm_batch.json" ;;
        particles) $py benchmarks/particles.py --backend torch --device cuda \
                --sizes 1e4,1e5,1e6,1e7 --dtypes float32,float64 ${PARTICLES_ARGS:-} \
                --out "$out/particles.json" ;;
        tuning) $py benchmarks/fused_tuning.py --out "$out/fused_tuning.json" ;;
        notebook) $py -m mfgwork run notebooks/02_cpu_vs_accelerator.ipynb -p accelerator cuda \
                -o "$out/02_cpu_vs_accelerator" ;;
        torch_path) $py benchmarks/torch_path.py --repeats 3 --out "$out/torch_path_emulation.json"
                $py benchmarks/torch_path.py --repeats 3 --device cuda \
                --out "$out/torch_path_cuda.json" ;;
        crossover) $py benchmarks/crossover.py --repeats 2 --emulation-batches "" \
                --emulation-particles "" ${CROSSOVER_ARGS:-} --out "$out/crossover.json" ;;
        *) echo "unknown part: $part" >&2; exit 2 ;;
    esac
done
