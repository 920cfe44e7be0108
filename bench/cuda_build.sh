# Sourced by the GPU-machine scripts in bench/: `cuda_build ARCHS LOG [cmake options...]`
# configures and builds libgdn with the CUDA backend in ./build for the given
# CMAKE_CUDA_ARCHITECTURES, all jobs in parallel, the output to LOG; on failure it prints
# LOG's tail and returns 1.
cuda_build() {
  local archs=$1 log=$2
  shift 2
  { cmake -S . -B build -DGDN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" "$@" &&
    cmake --build build -j"$(nproc)"; } > "$log" 2>&1 || { tail -40 "$log"; return 1; }
}
