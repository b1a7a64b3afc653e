//! Diakosmos's byte wire (SYSTEMS.md §3.2): the fixed 256 × 1,330 table through which a byte
//! enters the model in place of a learned embedding. A row is 7 groups × 95 phasors × (cos, sin).
//!
//! **Groups and base phases (from the seed).** Groups 0–3 are the byte's bit pairs (bits 7–6,
//! 5–4, 3–2, 1–0), each Gray-coded onto QPSK: a pair of value k (high bit first) has phase
//! φ(k) = π/4 + k·π/2 wrapped to (−π, π]. Groups 4–6 are the Hamming parities of those phases
//! a, b, c, d: p0 = a + c + d, p1 = a + b + d, p2 = b + c + d, mod 2π and wrapped. These reproduce
//! all 49 phases the seed page tabulates for the bytes D, i, a, k, o, s, m (tested below).
//!
//! Every phase here is a whole multiple of π/8, so phases are computed exactly as integers in
//! units of π/8 (wrapped to (−8, 8]) and turned into radians only for the final cos and sin. The
//! table is therefore exact up to one f64 cos/sin rounded to f32, and identical on every machine.
//!
//! The seed leaves the rest open (SYSTEMS.md marks it [UNK]); each item below is a **choice**:
//!
//! - **Choice: what the three Haar scales are taken over.** Scale s (H1, H2, H3 for s = 1, 2, 3)
//!   pairs group g with group g XOR 2^(s−1), a Haar tree over the 7 groups padded to 8, where the
//!   missing eighth group is replaced by group 0. H1 therefore pairs (0,1), (2,3), (4,5) — the
//!   pairs the spatial path also uses, as SYSTEMS.md's plausible reading suggests — and (6,0);
//!   H2 pairs (0,2), (1,3), (4,6), (5,0); H3 pairs (0,4), (1,5), (2,6), (3,0). Why: it is the
//!   standard dyadic Haar pairing, and every group gets a partner distinct from itself at every
//!   scale.
//! - **Choice: what "averages and differences" mean on a circle.** In a pair (lower, upper) the
//!   lower group's Haar phase is the sum θ_lower + θ_upper (the "average") and the upper group's
//!   is the difference θ_lower − θ_upper, both mod 2π. Why: a half-sum of phases is not defined
//!   mod 2π (its two candidates differ by π), whereas the sum and difference are the phases of
//!   z_lower·z_upper and z_lower·conj(z_upper), the unnormalised Haar average and difference of
//!   the phasors. With the partners distinct and jointly uniform over the bytes, each Haar scale
//!   is again a 4-point constellation ({0, π/2, π, −π/2}) with 64 bytes on each point, as the
//!   seed's constellation shows for "one group and scale" (tested below for all 21).
//! - **Choice: which (scale, rotation) each of the 95 harmonics uses.** Harmonic h (0 ≤ h < 95)
//!   uses scale h mod 4 (0 base, 1–3 H1–H3) rotated by r·π/8 with r = h div 4 (0…23); the phase
//!   is not multiplied. Why: it is the literal reading of "those four scales rotated by multiples
//!   of π/8", with the scales interleaved so each gets 24 rotations but H3, which gets 23. A
//!   consequence worth knowing: rotations r and r + 16 coincide, so harmonics h and h + 64
//!   (h < 31) are equal columns.
//! - **Choice: order within a group.** Harmonic h of group g occupies columns
//!   g·190 + 2h (cos) and g·190 + 2h + 1 (sin): cos and sin interleaved.
//! - **Choice: no amplitude scaling.** Every (cos, sin) pair is a unit phasor.

/// Wire groups: four bit pairs and three parities.
pub const GROUPS: usize = 7;
/// Phases a group: the base scale and the Haar scales H1–H3.
pub const SCALES: usize = 4;
/// Phasors a group.
pub const HARMONICS: usize = 95;
/// Numbers a group: cos and sin of each harmonic.
pub const GROUP_WIDTH: usize = 2 * HARMONICS;
/// Numbers a byte's row.
pub const WIDTH: usize = GROUPS * GROUP_WIDTH;
/// Rows of the table: one a byte value.
pub const ROWS: usize = 256;

/// Units of π/8 in a full turn.
const TURN: i32 = 16;

/// `units` (of π/8) wrapped to (−8, 8], i.e. the phase wrapped to (−π, π].
fn wrap(units: i32) -> i32 {
    let m = units.rem_euclid(TURN);
    if m > TURN / 2 {
        m - TURN
    } else {
        m
    }
}

/// The base-scale phases of the byte's 7 groups, in units of π/8 wrapped to (−8, 8].
pub fn base_units(byte: u8) -> [i32; GROUPS] {
    // φ(k) = π/4 + k·π/2 = (2 + 4k) units.
    let pair = |shift: u32| wrap(2 + 4 * i32::from((byte >> shift) & 3));
    let (a, b, c, d) = (pair(6), pair(4), pair(2), pair(0));
    [a, b, c, d, wrap(a + c + d), wrap(a + b + d), wrap(b + c + d)]
}

/// Group g's partner at Haar scale `scale` (1–3): g XOR 2^(scale−1), with group 0 standing in
/// for the absent eighth group.
pub fn haar_partner(group: usize, scale: usize) -> usize {
    let partner = group ^ (1 << (scale - 1));
    if partner >= GROUPS {
        0
    } else {
        partner
    }
}

/// The byte's 28 phases, `[group][scale]` (scale 0 base, 1–3 H1–H3), in units of π/8 wrapped
/// to (−8, 8].
pub fn phase_units(byte: u8) -> [[i32; SCALES]; GROUPS] {
    let base = base_units(byte);
    let mut phases = [[0; SCALES]; GROUPS];
    for (group, row) in phases.iter_mut().enumerate() {
        row[0] = base[group];
        for (scale, slot) in row.iter_mut().enumerate().skip(1) {
            let partner = haar_partner(group, scale);
            *slot = if group < partner { wrap(base[group] + base[partner]) } else { wrap(base[partner] - base[group]) };
        }
    }
    phases
}

/// Harmonic h's (scale, rotation in units of π/8).
pub fn harmonic_scale_rotation(harmonic: usize) -> (usize, i32) {
    // h < 95, so h / 4 < 24 and fits an i32.
    (harmonic % SCALES, (harmonic / SCALES) as i32)
}

/// The byte's row of the wire: `WIDTH` numbers, group-major, cos and sin interleaved.
pub fn wire_row(byte: u8) -> Vec<f32> {
    let phases = phase_units(byte);
    let mut row = Vec::with_capacity(WIDTH);
    for group_phases in &phases {
        for harmonic in 0..HARMONICS {
            let (scale, rotation) = harmonic_scale_rotation(harmonic);
            let radians = f64::from(wrap(group_phases[scale] + rotation)) * std::f64::consts::FRAC_PI_8;
            row.push(radians.cos() as f32);
            row.push(radians.sin() as f32);
        }
    }
    row
}

/// The whole table, `ROWS × WIDTH`, row-major: row b is [`wire_row`] of byte b.
pub fn wire_table() -> Vec<f32> {
    (0..=255u8).flat_map(wire_row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn base_phases_match_the_seed_pages_table() {
        // The seed page's table, in multiples of π: b7–6, b5–4, b3–2, b1–0, p0, p1, p2.
        let page: [(u8, [f64; GROUPS]); 7] = [
            (b'D', [0.750, 0.250, 0.750, 0.250, -0.250, -0.750, -0.750]),
            (b'i', [0.750, -0.750, -0.750, 0.750, 0.750, 0.750, -0.750]),
            (b'a', [0.750, -0.750, 0.250, 0.750, -0.250, 0.750, 0.250]),
            (b'k', [0.750, -0.750, -0.750, -0.250, -0.250, -0.250, 0.250]),
            (b'o', [0.750, -0.750, -0.250, -0.250, 0.250, -0.250, 0.750]),
            (b's', [0.750, -0.250, 0.250, -0.250, 0.750, 0.250, -0.250]),
            (b'm', [0.750, -0.750, -0.250, 0.750, -0.750, 0.750, -0.250]),
        ];
        for (byte, expected) in page {
            let phases = phase_units(byte);
            for group in 0..GROUPS {
                let in_pi = f64::from(phases[group][0]) / 8.0;
                assert_eq!(in_pi, expected[group], "byte {:?} group {group}", byte as char);
            }
            // The row's harmonic 0 (base scale, no rotation) carries that phase.
            let row = wire_row(byte);
            for group in 0..GROUPS {
                let angle = expected[group] * std::f64::consts::PI;
                let (cos, sin) = (row[group * GROUP_WIDTH], row[group * GROUP_WIDTH + 1]);
                assert!((f64::from(cos) - angle.cos()).abs() < 1e-7, "byte {:?} group {group} cos", byte as char);
                assert!((f64::from(sin) - angle.sin()).abs() < 1e-7, "byte {:?} group {group} sin", byte as char);
            }
        }
    }

    #[test]
    fn every_group_and_scale_is_four_points_of_64_bytes() {
        for group in 0..GROUPS {
            for scale in 0..SCALES {
                let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
                for byte in 0..=255u8 {
                    *counts.entry(phase_units(byte)[group][scale]).or_default() += 1;
                }
                let points: Vec<i32> = counts.keys().copied().collect();
                let expected_points = if scale == 0 { vec![-6, -2, 2, 6] } else { vec![-4, 0, 4, 8] };
                assert_eq!(points, expected_points, "group {group} scale {scale}");
                assert!(counts.values().all(|&n| n == 64), "group {group} scale {scale}: {counts:?}");
            }
        }
    }

    #[test]
    fn haar_scales_pair_distinct_groups_and_h1_uses_the_spatial_pairs() {
        for scale in 1..SCALES {
            for group in 0..GROUPS {
                assert_ne!(haar_partner(group, scale), group, "group {group} scale {scale}");
            }
        }
        for (lower, upper) in [(0, 1), (2, 3), (4, 5)] {
            assert_eq!(haar_partner(lower, 1), upper);
            assert_eq!(haar_partner(upper, 1), lower);
        }
        // Byte 'D': a = 6, b = 2 units; H1 of group 0 is a + b, of group 1 is a − b.
        let phases = phase_units(b'D');
        assert_eq!(phases[0][1], 8);
        assert_eq!(phases[1][1], 4);
    }

    #[test]
    fn rows_are_finite_unit_phasors_of_full_width() {
        let table = wire_table();
        assert_eq!(table.len(), ROWS * WIDTH);
        for (byte, row) in table.chunks(WIDTH).enumerate() {
            assert_eq!(row.len(), WIDTH);
            for (pair, phasor) in row.chunks(2).enumerate() {
                assert!(phasor.iter().all(|x| x.is_finite()), "byte {byte} phasor {pair}");
                let length = f64::from(phasor[0]).hypot(f64::from(phasor[1]));
                assert!((length - 1.0).abs() < 1e-6, "byte {byte} phasor {pair}: length {length}");
            }
        }
    }

    #[test]
    fn harmonics_are_the_scales_rotated_by_eighths_of_pi() {
        let byte = b'k';
        let phases = phase_units(byte);
        let row = wire_row(byte);
        for (group, group_phases) in phases.iter().enumerate() {
            for harmonic in 0..HARMONICS {
                let (scale, rotation) = harmonic_scale_rotation(harmonic);
                let angle = (f64::from(group_phases[scale]) + f64::from(rotation)) * std::f64::consts::FRAC_PI_8;
                let at = group * GROUP_WIDTH + 2 * harmonic;
                assert!((f64::from(row[at]) - angle.cos()).abs() < 1e-7, "group {group} harmonic {harmonic}");
                assert!((f64::from(row[at + 1]) - angle.sin()).abs() < 1e-7, "group {group} harmonic {harmonic}");
            }
        }
        // The first harmonic is the base scale unrotated, the last H2 rotated by 23·π/8; the
        // base, H1 and H2 get 24 rotations each and H3 gets 23.
        assert_eq!(harmonic_scale_rotation(0), (0, 0));
        assert_eq!(harmonic_scale_rotation(94), (2, 23));
        let per_scale: Vec<usize> =
            (0..SCALES).map(|s| (0..HARMONICS).filter(|&h| harmonic_scale_rotation(h).0 == s).count()).collect();
        assert_eq!(per_scale, [24, 24, 24, 23]);
    }

    #[test]
    fn the_table_is_a_pure_function() {
        let first: Vec<u32> = wire_table().iter().map(|x| x.to_bits()).collect();
        let second: Vec<u32> = wire_table().iter().map(|x| x.to_bits()).collect();
        assert_eq!(first, second);
        // Distinct bytes get distinct rows: the wire loses no byte.
        let rows: std::collections::BTreeSet<&[u32]> = first.chunks(WIDTH).collect();
        assert_eq!(rows.len(), ROWS);
    }
}
