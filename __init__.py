"""Neural ROM: reduced-order and neural deformable simulation for Blender.

bpy is imported only inside register()/unregister(), so ``neural_rom.core`` and
``neural_rom.training`` import outside Blender.
"""


def register() -> None:
    from .addon import registration

    registration.register()


def unregister() -> None:
    from .addon import registration

    registration.unregister()
