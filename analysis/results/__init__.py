"""Result objects and the analyses that build them: breakdown, job breakdown, compare, scaling, matrix, sweep, suggestions."""
