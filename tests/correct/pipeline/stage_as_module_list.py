r"""PipelineStage keeps its blocks in an nn.ModuleList and runs them in a loop.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "PipelineStage.__init__": [
        (r'''        self.layers = model[start:stop]
''',
         r'''        self.layers = nn.ModuleList(model[i] for i in range(start, stop))
'''),
    ],
    "PipelineStage.forward": [
        (r'''    def forward(self, x):
        return self.layers(x)
''',
         r'''    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
'''),
    ],
}
