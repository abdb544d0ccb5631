"""The seeds' published figures, transcribed from the papers, with the hardware each was measured on.

Every figure here is printed in its paper; nothing is read off a plot (the text versions of the seeds lost
their figures, so only tables and prose claims survive).  References give the section and the page where the
section starts in the paper's table of contents, and the table number.

* Baltus 2021 (seed 004), *Approximating pattern matching queries over big data streams* (TU/e MSc thesis),
  ch. 5: Tables 5.1–5.6.  Times are average seconds per query (Tables 5.1, 5.2, 5.5, 5.6) or per build
  (Table 5.4).
* Cadonna 2013 (seed 000), *Sequenced event set pattern matching* (PhD thesis), §4.7 and §5.4: Table 4.1
  (maximal match-window sizes of the derived data sets) and the prose claims on growth and on the two-phase
  strategy's throughput increase.
* Agrawal et al. 2008 (seed 001, SASE+) and Kolchinsky & Schuster (seed 003, lazy chain NFA): the only
  absolute throughput statements of the exact-matching seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hardware:
    """Where a seed's figures were measured (as the paper states it)."""

    label: str
    cpu: str
    memory: str
    system: str
    software: str


@dataclass(frozen=True)
class SeedTable:
    """One published table: its columns and rows exactly as printed (``None`` = not printed)."""

    key: str
    title: str
    reference: str
    hardware: Hardware
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]
    unit: str = ""
    notes: str = ""

    def column(self, name: str) -> dict[object, object]:
        """The values of column ``name`` keyed by the first column of each row."""
        i = self.columns.index(name)
        return {row[0]: row[i] for row in self.rows}


@dataclass(frozen=True)
class SeedClaim:
    """A figure stated in a seed's prose (its plots did not survive as numbers)."""

    key: str
    reference: str
    hardware: Hardware
    claim: str
    tags: tuple[str, ...] = field(default_factory=tuple)


BALTUS_HW = Hardware(
    label="Baltus 2021",
    cpu="2 vCPUs at 2.7 GHz",
    memory="16 GB",
    system="Ubuntu 20.04 LTS x64",
    software="the thesis' implementation (MurmurHash3 Bloom filters); Mavroudopoulos et al. on Cassandra",
)

CADONNA_HW = Hardware(
    label="Cadonna 2013",
    cpu="4 × AMD Opteron 285 (1.8 GHz in §4.7; '1.8 and 2.6 GHz' in §5.4)",
    memory="16 GB",
    system="64-bit Linux 2.6.32",
    software="C; events in Oracle Enterprise Edition 11.1 read over OCI",
)

SASE_HW = Hardware(
    label="Agrawal et al. 2008 (SASE+)",
    cpu="Pentium 4, 2.8 GHz",
    memory="1.0 GB (JVM pool 750 MB)",
    system="Linux 2.6.9",
    software="Java prototype, HotSpot 1.5",
)

LAZY_HW = Hardware(
    label="Kolchinsky & Schuster (lazy chain NFA)",
    cpu="2.20 GHz",
    memory="16.0 GB",
    system="not stated",
    software="Java",
)

_BALTUS_QUERY_LENGTHS = (2, 3, 4, 5, 6, 7, 8)

BALTUS_T51 = SeedTable(
    key="baltus-5.1",
    title="BPI 2020 (36,796 events, 19 types): average query time per query by query length",
    reference="Baltus 2021, §5.1.3 (from p. 42), Table 5.1",
    hardware=BALTUS_HW,
    columns=("length", "Mavroudopoulos et al. (exact)", "Approach 1", "Approach 2"),
    rows=tuple(zip(_BALTUS_QUERY_LENGTHS,
                   (0.0143, 0.0481, 0.0749, 0.1896, 0.3024, 0.4468, 0.6800),
                   (0.0040, 0.0032, 0.0031, 0.0029, 0.0029, 0.0025, 0.0021),
                   (0.0362, 0.0309, 0.0320, 0.0307, 0.0295, 0.0308, 0.0318), strict=True)),
    unit="s",
    notes="100 random SEQ queries per length under skip-till-next, each experiment repeated 10 times; "
          "Approach 1 = the approximate tree over the whole time-ordered log (all matches across traces).",
)

BALTUS_T52 = SeedTable(
    key="baltus-5.2",
    title="BPI 2017 (1,202,267 events, 26 types): average query time per query by query length",
    reference="Baltus 2021, §5.1.3 (from p. 42), Table 5.2",
    hardware=BALTUS_HW,
    columns=("length", "Mavroudopoulos et al. (exact)", "Approach 1", "Approach 2"),
    rows=tuple(zip(_BALTUS_QUERY_LENGTHS,
                   (0.07654, 0.27445, 0.63936, 1.24048, 2.12963, 3.46484, 5.37686),
                   (0.0705, 0.0668, 0.0665, 0.0644, 0.0644, 0.0619, 0.0585),
                   (4.6239, 4.3471, 4.1347, 4.5579, 4.5179, 4.6149, 4.2729), strict=True)),
    unit="s",
    notes="Same protocol as Table 5.1.",
)

BALTUS_T53 = SeedTable(
    key="baltus-5.3",
    title="Synthetic word streams (concatenated Project Gutenberg books)",
    reference="Baltus 2021, §5.2 (from p. 47), Table 5.3",
    hardware=BALTUS_HW,
    columns=("dataset", "events", "distinct items"),
    rows=(("D1", 511_178, 30_439), ("D2", 2_489_295, 38_793), ("D3", 5_489_709, 52_451),
          ("D4", 1_705_977, 87_130)),
)

BALTUS_T54 = SeedTable(
    key="baltus-5.4",
    title="Average construction time of the tree (M = 2 GB, N = dataset size, C = 100, fpq = 1e-4, s = 3)",
    reference="Baltus 2021, §5.2.1 (p. 48), Table 5.4",
    hardware=BALTUS_HW,
    columns=("dataset", "construction time"),
    rows=(("D1", 4.58), ("D2", 11.09), ("D3", 51.04), ("D4", 14.78)),
    unit="s",
    notes="Average of 100 builds per dataset.",
)

_OPERATOR_FORMS = ("SEQ(A, B, C)", "SEQ(A, OR(B, C))", "SEQ(A, AND(B, C))", "SEQ(A, NOT(B), C)")

BALTUS_T55 = SeedTable(
    key="baltus-5.5",
    title="Average query time per query under strict contiguity (100 random queries of length 3)",
    reference="Baltus 2021, §5.2.2 (p. 48), Table 5.5",
    hardware=BALTUS_HW,
    columns=("query", "D1", "D2", "D3", "D4"),
    rows=tuple(zip(_OPERATOR_FORMS, (0.001, 0.013, 0.003, 0.002), (0.005, 0.045, 0.008, 0.004),
                   (0.015, 0.083, 0.025, 0.010), (0.003, 0.004, 0.004, 0.002), strict=True)),
    unit="s",
    notes="All matching intervals returned; A, B, C drawn from the dataset's events at run time.",
)

BALTUS_T56 = SeedTable(
    key="baltus-5.6",
    title="Average query time per query under skip-till-next (100 random queries of length 3)",
    reference="Baltus 2021, §5.2.2 (p. 48), Table 5.6",
    hardware=BALTUS_HW,
    columns=("query", "D1", "D2", "D3", "D4"),
    rows=tuple(zip(_OPERATOR_FORMS, (0.015, 0.037, 0.023, 0.012), (0.266, 0.944, 0.562, 0.212),
                   (1.650, 6.421, 3.510, 1.051), (0.029, 0.043, 0.029, 0.018), strict=True)),
    unit="s",
)

CADONNA_T41 = SeedTable(
    key="cadonna-4.1",
    title="Derived data sets with growing maximal match-window size |Ŵ| (events copied 0…9 times, trimmed)",
    reference="Cadonna 2013, §4.7.4 (p. 47), Table 4.1",
    hardware=CADONNA_HW,
    columns=("copies", "Onco", "Onco |Ŵ|", "NYSE", "NYSE |Ŵ|"),
    rows=tuple((i, f"O{i + 1}", w_o, f"N{i + 1}", w_n) for i, (w_o, w_n) in enumerate(zip(
        (2602, 2946, 3290, 3634, 3978, 4322, 4666, 5010, 5354, 5698),
        (984, 1225, 1627, 1945, 2431, 2917, 3403, 3889, 4375, 4861), strict=True))),
    unit="events",
    notes="Onco: 341,055 chemotherapy events, τ = 5 days, same patient; NYSE: 1M trades, τ = 1 s. Runtime "
          "was plotted (Fig. 4.13), not printed.",
)

CLAIMS = (
    SeedClaim("cadonna-4.7.4", "Cadonna 2013, §4.7.4 (p. 47), Fig. 4.13", CADONNA_HW,
              "Runtime grows linearly with |Ŵ| for pairwise mutually exclusive variables (P1–P3) and "
              "polynomially for not mutually exclusive ones (P4, P5).", ("window",)),
    SeedClaim("cadonna-4.7.5", "Cadonna 2013, §4.7.5 (p. 48), Fig. 4.14", CADONNA_HW,
              "Runtime is roughly linear in the stream size (Onco 34,105–341,050; NYSE 100K–1M events).",
              ("window",)),
    SeedClaim("cadonna-5.4.2-set", "Cadonna 2013, §5.4.2 (p. 62), Fig. 5.5", CADONNA_HW,
              "Match windows with filtering, partitioning and necessary conditions raise SES throughput "
              "by more than two orders of magnitude for P_set, much less for P_seq.", ("two-phase",)),
    SeedClaim("cadonna-5.4.2-zstream", "Cadonna 2013, §5.4.2 (p. 62), Fig. 5.6", CADONNA_HW,
              "For ZStream, filtering, partitioning and necessary conditions together still increase the "
              "throughput three to four times.", ("two-phase",)),
    SeedClaim("cadonna-5.4.3", "Cadonna 2013, §5.4.3 (p. 63), Fig. 5.7", CADONNA_HW,
              "The throughput increase of the two-phase strategy stays roughly constant with the stream "
              "size (100 to 1M events).", ("two-phase",)),
    SeedClaim("sase-6", "Agrawal et al. 2008, §6 and §8", SASE_HW,
              "'Tens of thousands of events per second' for fairly expensive queries; every expensive "
              "query of Expt 5 ran at more than 10,000 events/s.", ("throughput",)),
    SeedClaim("lazy-8.1", "Kolchinsky & Schuster, §8.1, Fig. 10", LAZY_HW,
              "Lazy (rarest-first) evaluation raises throughput by one to two orders of magnitude over "
              "eager evaluation; no absolute events/s are printed.", ("throughput",)),
)

TABLES = {t.key: t for t in (BALTUS_T51, BALTUS_T52, BALTUS_T53, BALTUS_T54, BALTUS_T55, BALTUS_T56,
                             CADONNA_T41)}
OPERATOR_FORMS = _OPERATOR_FORMS


def claims(tag: str) -> list[SeedClaim]:
    """The prose claims carrying ``tag``."""
    return [c for c in CLAIMS if tag in c.tags]
