"""What a reader of a figure needs and must not lose: every axis labelled, every line in a
legend, no name from the code (:func:`problems`), and a panel's notes where they hide no data
(:func:`place_clear`)."""

from __future__ import annotations

import re

import numpy as np

# A name from the code (a metric or a setting: max_t1_t2, as_written), which no text a figure
# shows a reader is; a run's name (resnet18_momentum.1), which the config and the report call
# it by, is none.
CODE_NAME = re.compile(r"\b[^\W_]+_\w+\b(?!\.\d)")


def problems(fig) -> list[str]:
    """What ``fig`` leaves a reader to guess, one sentence each: an axis without a label (but
    one sharing it with a labelled panel's, and a panel without data,
    :func:`~d2lrepro.core.plotting.no_data`), a labelled line or bar that no legend shows or a
    legend entry that names none, a panel of several lines with one unlabelled (reference lines
    across the panel, such as :func:`~d2lrepro.core.plotting.mark_divergence`'s, apart), and a
    name from the code in its texts."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    found = []
    for i, ax in enumerate(fig.axes):
        if not (ax.get_visible() and ax.axison and ax.has_data()):
            continue
        panel = f"panel {i + 1} ({ax.get_title()})" if ax.get_title() else f"panel {i + 1}"
        for axis in ["x", "y", "z"][: 3 if ax.name == "3d" else 2]:
            shared = getattr(ax, f"get_shared_{axis}_axes")().get_siblings(ax)
            if not any(getattr(a, f"get_{axis}label")().strip() for a in shared):
                found.append(f"{panel}: its {axis} axis has no label")
        parts = {id(p) for c in ax.containers for p in c.get_children()}
        unlabelled = [
            line
            for line in ax.lines
            if id(line) not in parts and line.get_transform() is ax.transData
        ]
        if len(unlabelled) > 1 and any(line.get_label().startswith("_") for line in unlabelled):
            found.append(f"{panel}: {len(unlabelled)} lines, not every one labelled")
    drawn = {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}
    legends = fig.findobj(Legend)
    shown = [t.get_text() for legend in legends for t in legend.get_texts()]
    if legends or len(drawn) > 1:
        found += [f"{label!r} is in no legend" for label in sorted(drawn - set(shown))]
        found += [f"legend entry {label!r} names no line" for label in sorted(set(shown) - drawn)]
    texts = [t.get_text() for t in fig.findobj(Text)]
    found += [f"a name from the code: {name!r}" for t in texts for name in CODE_NAME.findall(t)]
    return found


# Where :func:`place_clear` may put a text in a panel, in turn: (x, y) in the panel's fractions
# and the text's alignment there.
PLACES = [
    (0.98, 0.04, "right", "bottom"),
    (0.02, 0.04, "left", "bottom"),
    (0.98, 0.96, "right", "top"),
    (0.02, 0.96, "left", "top"),
    (0.5, 0.04, "center", "bottom"),
    (0.5, 0.96, "center", "top"),
    (0.98, 0.5, "right", "center"),
    (0.02, 0.5, "left", "center"),
]


def place_clear(ax, text) -> bool:
    """Moves ``text`` (placed in ``ax``'s fractions) to the first of :data:`PLACES` where it
    covers no point of the panel's lines (20 along each segment), no marker, no bar and no
    legend; where every place covers some, above the panel (and its title), where it hides
    nothing but takes room: False then, and the figure's layout is to be made again."""
    from matplotlib.transforms import offset_copy

    renderer = ax.figure.canvas.get_renderer()
    points = [np.empty((0, 2))]
    for line in ax.lines:
        xy = line.get_transform().transform(line.get_xydata())
        steps = np.linspace(0, 1, 20)[:, None, None]
        points.append((xy[:-1] + steps * (xy[1:] - xy[:-1])).reshape(-1, 2))
    points += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections]
    points = np.concatenate(points)
    points = points[np.isfinite(points).all(axis=1)]
    legend = [ax.get_legend()] if ax.get_legend() else []
    boxes = [a.get_window_extent(renderer) for a in [*ax.patches, *legend] if a.get_visible()]

    def clear(place) -> bool:
        x, y, ha, va = place
        text.set(x=x, y=y, ha=ha, va=va)
        box = text.get_window_extent(renderer).padded(4)
        (x0, y0), (x1, y1) = box.get_points()
        inside = ((points >= (x0, y0)) & (points <= (x1, y1))).all(axis=1)
        return not inside.any() and not any(box.overlaps(b) for b in boxes)

    if any(clear(place) for place in PLACES):
        return True
    lift = 3.0  # points above the panel, or above its title
    if ax.get_title():
        from matplotlib import rcParams

        title = ax.title.get_window_extent(renderer)
        lift += rcParams["axes.titlepad"] + title.height * 72 / ax.figure.dpi
    above = offset_copy(ax.transAxes, fig=ax.figure, y=lift, units="points")
    text.set(x=0.5, y=1.0, ha="center", va="bottom", transform=above)
    return False
