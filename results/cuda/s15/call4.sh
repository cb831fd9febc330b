export PYTHONPATH=$PWD; python3 -c "import gguf" 2>/dev/null || { python3 -m pip install -q --no-index --no-deps --target /tmp/tq-site .device/whl/gguf-*.whl; export PYTHONPATH=/tmp/tq-site:$PWD; }
python3 scripts/gpu/write_shape.py llama-3.1-8b /tmp/m8b.gguf | tail -1; python3 scripts/gpu/write_shape.py llama-3.1-8b /tmp/m8bv.gguf --vocab 32000 | tail -1
RUNS="f16/f16:128:128 turbo4/turbo4:128:128 f16/f16:128:2048 turbo4/turbo4:128:2048" timeout 250 bash scripts/gpu/roofline.sh batched /tmp/m8b.gguf
RUNS="f16/f16:128:128 turbo4/turbo4:128:128 turbo4/turbo4:128:2048" timeout 150 bash scripts/gpu/roofline.sh batched /tmp/m8bv.gguf
