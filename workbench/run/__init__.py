"""Running variants: the loaded build behind `wb.load` (loader: the harness, define_op, the load
path; kernel: the Kernel handle it returns; process_state: the one record of what this process
loaded), its torch.library op with autograd and fakes (torchops), nn layers, variants brought from
outside (byo: a callable or a torch extension written the course's way, one path; byo_kernel: the
handle it becomes, its checks and probe; pyvariant: Python/Triton variants), the notebook cell
magic, and sanitize (compute-sanitizer over a runner, workbench/judge).
May import: model, build.
"""
