"""Functions hostile code could hand to the launcher (importable: spawn pickles them by name)."""
import os


class Bomb:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):          # unpickling this runs a shell command
        return (os.system, (f"touch {self.marker}",))


def return_bomb(rank, world_size, marker):
    return Bomb(marker)
