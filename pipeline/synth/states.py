"""The 50 states and the District of Columbia: FIPS codes and 2020 census resident populations.

Source: U.S. Census Bureau, 2020 Census Apportionment Results, Table 2 "Resident Population for the 50 States,
the District of Columbia, and Puerto Rico: 2020 Census" (released April 26, 2021). The 50 states and DC sum to
331,449,281 (tests check it). Puerto Rico is left out: the nation here is the P.L. 94-171 US level.
"""

from __future__ import annotations

STATE_POPULATION_2020: tuple[tuple[int, str, int], ...] = (
    (1, "AL", 5_024_279), (2, "AK", 733_391), (4, "AZ", 7_151_502), (5, "AR", 3_011_524),
    (6, "CA", 39_538_223), (8, "CO", 5_773_714), (9, "CT", 3_605_944), (10, "DE", 989_948),
    (11, "DC", 689_545), (12, "FL", 21_538_187), (13, "GA", 10_711_908), (15, "HI", 1_455_271),
    (16, "ID", 1_839_106), (17, "IL", 12_812_508), (18, "IN", 6_785_528), (19, "IA", 3_190_369),
    (20, "KS", 2_937_880), (21, "KY", 4_505_836), (22, "LA", 4_657_757), (23, "ME", 1_362_359),
    (24, "MD", 6_177_224), (25, "MA", 7_029_917), (26, "MI", 10_077_331), (27, "MN", 5_706_494),
    (28, "MS", 2_961_279), (29, "MO", 6_154_913), (30, "MT", 1_084_225), (31, "NE", 1_961_504),
    (32, "NV", 3_104_614), (33, "NH", 1_377_529), (34, "NJ", 9_288_994), (35, "NM", 2_117_522),
    (36, "NY", 20_201_249), (37, "NC", 10_439_388), (38, "ND", 779_094), (39, "OH", 11_799_448),
    (40, "OK", 3_959_353), (41, "OR", 4_237_256), (42, "PA", 13_002_700), (44, "RI", 1_097_379),
    (45, "SC", 5_118_425), (46, "SD", 886_667), (47, "TN", 6_910_840), (48, "TX", 29_145_505),
    (49, "UT", 3_271_616), (50, "VT", 643_077), (51, "VA", 8_631_393), (53, "WA", 7_705_281),
    (54, "WV", 1_793_716), (55, "WI", 5_893_718), (56, "WY", 576_851),
)
"""(state FIPS, postal abbreviation, 2020 resident population), in FIPS order."""

N_STATES = len(STATE_POPULATION_2020)


def apportion(persons: int, states: int = N_STATES) -> list[tuple[int, int]]:
    """(state FIPS, persons) of the first ``states`` states by FIPS code, sharing exactly ``persons`` by their 2020
    shares: largest remainders in exact integer arithmetic (ties go to the lower FIPS code)."""
    if not 1 <= states <= N_STATES:
        raise ValueError(f"states must be between 1 and {N_STATES}, got {states}")
    chosen = STATE_POPULATION_2020[:states]
    total = sum(pop for _, _, pop in chosen)
    quotas = [(persons * pop // total, persons * pop % total) for _, _, pop in chosen]
    short = persons - sum(q for q, _ in quotas)
    by_remainder = sorted(range(states), key=lambda i: (-quotas[i][1], i))
    extra = set(by_remainder[:short])
    return [(fips, q + (i in extra)) for i, ((fips, _, _), (q, _)) in enumerate(zip(chosen, quotas, strict=True))]
