"""Generated grading cases per answer form, for the Math-Verify peer test (test_grader_math_verify.py).

Each case is a gold answer and a whole completion that writes one answer to it, right or wrong by
construction (`label`), in one of the ways a model writes its final answer: inside \\boxed{}, after a
"final answer" phrase, or only as the text's last math span ($...$, $$...$$, \\[...\\], \\(...\\)),
after a reasoning preamble whose numbers and math spans are decoys. The values are drawn from a seeded
generator, so each run checks the same cases and a new seed checks fresh ones.

Forms (docs/grading.md, "Agreement with Math-Verify"): no_box, several_answers, equations,
inequalities_intervals, matrices, text_choice, units_percent, number_formats.
"""

import math
import random

FORMS = ("no_box", "several_answers", "equations", "inequalities_intervals", "matrices",
         "text_choice", "units_percent", "number_formats")

# Reasoning before the answer: numbers and math spans that a grader taking the first or the last
# number, or the first math span, would wrongly read as the answer.
PREAMBLES = (
    "Let me work through this. First, $3 + 4 = 7$, and then step 2 gives 19.",
    "We set up the equation $2y = 14$, so $y = 7$; checking with 12 confirms it.",
    "Using the formula from part (1) with $n = 10$, we simplify carefully.",
    "After expanding, the 3 terms combine and the constant 8 cancels.",
)

# How the final answer is written. The box styles are what the reasoning prompts ask for; the
# others have no box, as models often write when the prompt does not insist.
BOX_STYLES = (
    "{pre} Therefore, the answer is $\\boxed{{{a}}}$.",
    "{pre}\n\n**Final Answer**\n\\[\n\\boxed{{{a}}}\n\\]",
)
NO_BOX_STYLES = (
    "{pre}\n\nThe final answer is ${a}$.",
    "{pre} So we obtain ${a}$.",
    "{pre} Hence\n\\[ {a} \\]",
    "{pre} Thus the result is \\({a}\\).",
    "{pre} Finally\n$${a}$$",
    "{pre}\n\n**Final Answer:** ${a}$",
    "{pre}\nFinal Answer: The final answer is ${a}$. I hope it is correct.",
)


class Generator:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.cases = []

    def add(self, form, gold, rights, wrongs, styles=("box", "no_box")):
        """One case per (answer, style): each answer once boxed and once unboxed (styles drawn)."""
        for label, answers in ((True, rights), (False, wrongs)):
            for answer in answers:
                for style in styles:
                    if isinstance(answer, Completion):  # written out whole (several boxes, short text)
                        text = answer.text
                    else:
                        template = self.rng.choice(BOX_STYLES if style == "box" else NO_BOX_STYLES)
                        text = template.format(pre=self.rng.choice(PREAMBLES), a=answer)
                    self.cases.append({"form": form, "gold": gold, "completion": text, "label": label,
                                       "answer": answer.text if isinstance(answer, Completion) else answer,
                                       "style": "whole" if isinstance(answer, Completion) else style})
                    if isinstance(answer, Completion):
                        break

    def int_(self, lo, hi):
        return self.rng.randint(lo, hi)


class Completion:
    """A completion given whole, not through a style template."""

    def __init__(self, text):
        self.text = text


def frac(a, b):
    return f"\\frac{{{a}}}{{{b}}}"


def coprime_fraction(g):
    while True:
        a, b = g.int_(1, 9), g.int_(2, 9)
        if math.gcd(a, b) == 1:
            return a, b


def no_box(g):
    a, b = coprime_fraction(g)
    short = f"\\frac{a}{b}" if a < 10 and b < 10 else frac(a, b)
    g.add("no_box", frac(a, b), [short, f"\\dfrac{{{2 * a}}}{{{2 * b}}}", f"{a}/{b}"],
          [frac(a + 1, b), f"{a}{b}"], styles=("no_box",))
    lo, hi = g.int_(-5, 0), g.int_(1, 6)
    g.add("no_box", f"[{lo},{hi})", [f"[{lo},{hi})", f"[{lo}, {hi})"], [f"[{lo},{hi}]", f"({lo},{hi})"],
          styles=("no_box",))
    letter = g.rng.choice("ABCDE")
    other = g.rng.choice([c for c in "ABCDE" if c != letter])
    g.add("no_box", f"\\text{{{letter}}}", [f"\\text{{{letter}}}", letter], [f"\\text{{{other}}}"],
          styles=("no_box",))
    c, d = g.int_(2, 5), g.rng.choice([2, 3, 5, 6, 7])
    g.add("no_box", f"{c}\\sqrt{{{d}}}", [f"\\sqrt{{{c * c * d}}}", f"{c}\\sqrt{d}"], [f"{c + 1}\\sqrt{{{d}}}"],
          styles=("no_box",))
    n = g.int_(10, 99)
    g.add("no_box", f"-{n}", [f"-{n}"], [f"{n}", f"-{n + 1}"], styles=("no_box",))
    k = g.rng.choice([2, 3, 4, 6])
    g.add("no_box", f"\\frac{{\\pi}}{{{k}}}", [f"\\frac{{\\pi}}{{{k}}}", f"\\pi/{k}", f"\\frac{{2\\pi}}{{{2 * k}}}"],
          [f"\\frac{{\\pi}}{{{k + 1}}}", f"{k}\\pi"], styles=("no_box",))
    # A short completion that is only the answer.
    g.add("no_box", frac(a, b), [Completion(f"{a}/{b}"), Completion(f"${short}$")],
          [Completion(f"{b}/{a}")])


def several_answers(g):
    a, b = g.int_(-9, -1), g.int_(1, 9)
    g.add("several_answers", f"{a}, {b}",
          [f"{b}, {a}", f"{a}, {b}", f"\\{{{b}, {a}\\}}", f"{b} \\text{{ and }} {a}",
           Completion(f"The roots are $\\boxed{{{b}}}$ and $\\boxed{{{a}}}$."),
           Completion(f"So $x = \\boxed{{{a}}}$ or $x = \\boxed{{{b}}}$.")],
          [f"{a}", f"{a}, {b}, {b + 1}", f"{a}, {b + 1}",
           Completion(f"The roots are $\\boxed{{{a}}}$ and $\\boxed{{{b + 1}}}$.")])
    x, y, z = g.rng.sample(range(1, 20), 3)
    g.add("several_answers", f"\\{{{x}, {y}, {z}\\}}", [f"\\{{{z}, {x}, {y}\\}}", f"{y}, {z}, {x}"],
          [f"\\{{{x}, {y}\\}}", f"\\{{{x}, {y}, {z + 20}\\}}"])
    r, t = g.int_(1, 9), g.rng.choice([2, 3, 5, 7])
    g.add("several_answers", f"{r} \\pm \\sqrt{{{t}}}",
          [f"{r} + \\sqrt{{{t}}}, {r} - \\sqrt{{{t}}}", f"{r} - \\sqrt{{{t}}}, {r} + \\sqrt{{{t}}}", f"{r} \\pm \\sqrt{{{t}}}"],
          [f"{r} + \\sqrt{{{t}}}", f"{r + 1} \\pm \\sqrt{{{t}}}"])
    p, q = sorted(g.rng.sample(range(1, 20), 2), reverse=True)  # p > q: a point, not an interval
    g.add("several_answers", f"({p}, {q})", [f"({p},{q})", f"\\left({p}, {q}\\right)"],
          [f"({q}, {p})", f"({p}, {q + 20})"])


def equations(g):
    a, b = g.int_(1, 9), g.int_(10, 19)
    g.add("equations", f"(p,q)=({a},{b})", [f"({a},{b})", f"(p, q) = ({a}, {b})"],
          [f"({b},{a})", f"(p,q) = ({a}, {b + 1})"])
    n = g.int_(2, 40)
    g.add("equations", f"{n}", [f"x = {n}", f"x = {n - 1} + 1 = {n}", f"{n}"],
          [f"x = {n + 1}", f"x = {n} + 1 = {n + 1}"])
    m, c = g.int_(2, 6), g.int_(1, 9)
    g.add("equations", f"y = {m}x + {c}",
          [f"y = {c} + {m}x", f"{m}x - y + {c} = 0", f"2y = {2 * m}x + {2 * c}", f"{m}x + {c}"],
          [f"y = {m}x - {c}", f"y = {c}x + {m + c}", f"{m}x - y - {c} = 0"])
    h, v, r2 = g.int_(1, 5), g.int_(1, 5), g.rng.choice([4, 9, 16, 25])
    g.add("equations", f"(x-{h})^2 + (y+{v})^2 = {r2}",
          [f"(y+{v})^2 + (x-{h})^2 = {r2}", f"x^2 - {2 * h}x + y^2 + {2 * v}y + {h * h + v * v - r2} = 0"],
          [f"(x+{h})^2 + (y+{v})^2 = {r2}", f"(x-{h})^2 + (y+{v})^2 = {r2 + 1}"])
    k = g.int_(2, 30)
    g.add("equations", f"x = {k}", [f"{k}", f"x={k}"], [f"{k + 1}", f"x = -{k}"])


def inequalities_intervals(g):
    a = g.int_(-9, 9)
    g.add("inequalities_intervals", f"x \\geq {a}",
          [f"x >= {a}", f"x \\ge {a}", f"{a} \\le x", f"[{a}, \\infty)"],
          [f"x > {a}", f"({a}, \\infty)", f"x \\le {a}"])
    b = g.int_(-9, 9)
    g.add("inequalities_intervals", f"[{b}, \\infty)", [f"[{b},\\infty)", f"x \\geq {b}"],
          [f"({b},\\infty)", f"x > {b}"])
    lo, hi = g.int_(-9, 0), g.int_(1, 9)
    g.add("inequalities_intervals", f"{lo} < x < {hi}",
          [f"({lo}, {hi})", f"{lo}<x<{hi}", f"{hi} > x > {lo}"],
          [f"[{lo}, {hi}]", f"{lo} \\le x < {hi}"])
    lo2, hi2 = g.int_(-9, 0), g.int_(1, 9)
    g.add("inequalities_intervals", f"({lo2}, {hi2})", [f"{lo2} < f(x) < {hi2}", f"({lo2},{hi2})"],
          [f"({lo2}, {hi2}]", f"{lo2} < f(x) \\le {hi2}"])
    c = g.int_(-9, 9)
    g.add("inequalities_intervals", f"x < {c}", [f"{c} > x", f"(-\\infty, {c})"],
          [f"x \\le {c}", f"(-\\infty, {c}]"])


def matrix(rows, env="pmatrix"):
    body = " \\\\ ".join(" & ".join(str(v) for v in row) for row in rows)
    return f"\\begin{{{env}}} {body} \\end{{{env}}}"


def matrices(g):
    while True:
        m = [[g.int_(-9, 9) for _ in range(2)] for _ in range(2)]
        if m[0][1] != m[1][0]:
            break
    as_expressions = [[frac(2 * v, 2) if i == j else v for j, v in enumerate(row)] for i, row in enumerate(m)]
    changed = [row[:] for row in m]
    changed[1][1] += 1
    g.add("matrices", matrix(m), [matrix(m, "bmatrix"), matrix(as_expressions)],
          [matrix(changed), matrix([list(r) for r in zip(*m)])])
    v = [g.int_(-9, 9) for _ in range(3)]
    w = v[:]
    w[2] += 1
    g.add("matrices", matrix([[x] for x in v]), [matrix([[x] for x in v], "bmatrix"), f"({v[0]}, {v[1]}, {v[2]})"],
          [matrix([[x] for x in w]), f"({v[2]}, {v[1]}, {v[0]})" if v[0] != v[2] else f"({v[0]}, {v[1]}, {v[2] + 1})"])


WORDS = ("Evelyn", "even", "odd", "Tuesday", "east", "Bob")


def text_choice(g):
    letter = g.rng.choice("ABCDE")
    other = g.rng.choice([c for c in "ABCDE" if c != letter])
    g.add("text_choice", f"\\text{{({letter})}}",
          [letter, f"({letter})", f"\\textbf{{({letter})}}", f"\\text{{{letter}}}"],
          [other, f"\\textbf{{({other})}}"])
    value = g.int_(10, 99)
    g.add("text_choice", f"\\text{{({letter})}}", [f"\\text{{({letter})}} {value}", f"({letter})\\ {value}"],
          [f"\\text{{({other})}} {value}"])
    word, wrong = g.rng.sample(WORDS, 2)
    g.add("text_choice", f"\\text{{{word}}}", [word, f"\\text{{{word}}}", f"\\textbf{{{word}}}"],
          [f"\\text{{{wrong}}}"])


def units_percent(g):
    n = g.int_(2, 500)
    g.add("units_percent", f"{n}",
          [f"{n}\\text{{ meters}}", f"{n}\\textnormal{{ miles}}", f"{n}\\mbox{{cm}}^2", f"{n} \\text{{ cm}}^2"],
          [f"{n + 1}\\text{{ meters}}", f"{n + 10}\\mbox{{cm}}^2"])
    cost = g.int_(2, 900)
    g.add("units_percent", f"\\${cost}", [f"\\${cost}", f"{cost} \\text{{ dollars}}", f"\\${cost}.00"],
          [f"\\${cost + 1}", f"\\${cost}.50"])
    angle = g.rng.choice([30, 45, 60, 120, 135])
    g.add("units_percent", f"{angle}^\\circ", [f"{angle}^\\circ", f"{angle}^{{\\circ}}", f"{angle}"],
          [f"{angle + 15}^\\circ"])
    p = g.int_(2, 99)
    g.add("units_percent", f"{p}\\%", [f"{p}\\%", f"{p} pct", f"{p} \\text{{ percent}}", f"{p}"],
          [f"{p + 1}\\%", f"{p + 2} \\text{{ percent}}"])


def number_formats(g):
    n = g.int_(1001, 99999)
    grouped = f"{n:,}"
    g.add("number_formats", f"{n}",
          [grouped, grouped.replace(",", "{,}"), grouped.replace(",", "\\,"), grouped.replace(",", " ")],
          [f"{n + 1:,}", f"{n // 10}"])
    m = g.int_(11, 99)
    g.add("number_formats", f"{m * 100}", [f"{m / 10} \\times 10^{{3}}", f"{m}00"],
          [f"{m / 10} \\times 10^{{2}}"])
    d = g.int_(1, 9)
    g.add("number_formats", f"0.{d}", [f".{d}", f"0.{d}0"], [f".{d}1", f"{d}"])
    a, b = coprime_fraction(g)
    g.add("number_formats", frac(a, b), [f"\\\\frac{{{a}}}{{{b}}}"], [f"\\\\frac{{{b}}}{{{a + b}}}"])
    lo, hi = g.int_(-9, 0), g.int_(1, 9)
    g.add("number_formats", f"({lo},{hi}]", [f"\\\\left({lo}, {hi}\\\\right]"],
          [f"\\\\left[{lo}, {hi}\\\\right]"])
    c = g.int_(1, 9)
    g.add("number_formats", f"x \\le {c}", [f"x \\\\le {c}"], [f"x \\\\ge {c}"])


def generate(seed=0, rounds=6):
    """Every form `rounds` times with fresh values."""
    g = Generator(seed)
    for _ in range(rounds):
        for make in (no_box, several_answers, equations, inequalities_intervals, matrices, text_choice,
                     units_percent, number_formats):
            make(g)
    return g.cases
