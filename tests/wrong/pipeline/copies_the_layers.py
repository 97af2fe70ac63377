r"""PipelineStage deep-copies its blocks: the caller's model and optimizer never see its gradients.

EXPECT: construct/blocks whose own parameters the stage holds is \[\], expected \[0, 1, 2\].*no copies
CLASS: values
WORLD_SIZES: 2
ONLY: PipelineStage gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "PipelineStage.__init__": [
        (r'''        self.layers = model[start:stop]
''',
         r'''        self.layers = copy.deepcopy(model[start:stop])
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''import torch
''',
     r'''import copy

import torch
'''),
]
