# backends/cuda/cuda_libdirs.sh — sourced by the scripts that run CUDA
# programs on a GPU machine (device_check.sh, scripts/text_model_gpu.sh):
# cuda_libdirs prints every folder holding a CUDA runtime, cuBLAS or cuDNN
# library — the toolkit's, and those of the NVIDIA Python wheels that a
# PyTorch install brings — for LD_LIBRARY_PATH.
cuda_libdirs() {
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -d "$d" ] && echo "$d"
    done
    for py in python3 /usr/bin/python3; do
        site=$("$py" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' \
               2>/dev/null) || continue
        find "$site/nvidia" -name 'libcudnn.so*' -o -name 'libcublas*.so*' \
             -o -name 'libcudart.so*' 2>/dev/null | xargs -r -n1 dirname
    done | sort -u
}
