"""pytest set-up for the Python tests, loaded before any test module imports torch.

OpenMP's waiting policy is read once, when libgomp starts (at `import torch`). Its default spins
waiting for a peer thread; on this shared 2-core machine under load that made a ResNet-18 step 27x
slower (2.9 s instead of 0.11 s at load average 3.9), so the tests wait passively unless told otherwise.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
