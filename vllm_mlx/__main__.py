from vllm_mlx.cli import main

main()
