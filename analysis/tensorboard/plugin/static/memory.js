// gapscope's Memory view: one run's memory figures as its /details document has them (computed
// by analysis/results/memory: one traced step's allocation curve over its phase bands, per phase
// the high-water mark and the net change, creep, churn, what layers keep and where it is
// allocated); this only draws them.

import {html, notes, signed, svgEl, table} from './dom.js';

export function memoryView(m, colours) {
  if (!m) {
    return [html('p', {class: 'note memory-note'},
                 'no memory figures: the trace holds no allocator events and the run no RSS per step')];
  }
  const parts = [];
  const facts = [];
  if (m.peak_allocated_mb != null) {
    facts.push(`step peak ${mb(m.peak_allocated_mb)} MB` +
               (m.peak_reserved_mb != null ? `, reserved ${mb(m.peak_reserved_mb)} MB` : ''));
  }
  if (m.end_of_forward_mb != null) facts.push(`at the end of forward ${mb(m.end_of_forward_mb)} MB`);
  if (m.churn_mb_per_step != null) facts.push(`${mb(m.churn_mb_per_step)} MB freed and allocated again a step`);
  if (facts.length) {
    parts.push(html('p', {class: 'facts memory-facts'},
                    `${m.device || 'memory'} (${m.source}): ${facts.join('; ')}`));
  }
  if (m.creep_line) parts.push(html('p', {class: 'facts memory-creep'}, m.creep_line));
  if (m.step_curve) parts.push(curveChart(m.step_curve, colours));
  if (m.phases) {
    parts.push(html('h4', {}, `per phase (${m.unit}, mean of ${m.traced_steps} traced steps)`),
        table(['phase', 'high-water MB', 'net MB a step'], Object.entries(m.phases).map(([phase, f]) =>
            html('tr', {class: 'memory-phase', 'data-phase': phase}, html('td', {}, phase),
                 html('td', {class: 'num'}, mb(f.high_water_mb)),
                 html('td', {class: 'num'}, signed(f.net_mb, 3))))));
  }
  const kept = Object.entries(m.layers_kept_mb || {});
  if (kept.length) {
    parts.push(html('h4', {}, 'kept from forward for backward, per layer'),
        table(['layer', 'MB'], kept.map(([name, value]) =>
            html('tr', {class: 'memory-layer'}, html('td', {}, name), html('td', {class: 'num'}, mb(value))))));
  }
  if (m.top_sites && m.top_sites.length) {
    parts.push(html('h4', {}, 'top allocation sites (a step)'),
        table(['op', 'phase', 'MB', 'allocations'], m.top_sites.map((s) =>
            html('tr', {class: 'memory-site'}, html('td', {}, s.op), html('td', {}, s.phase || ''),
                 html('td', {class: 'num'}, mb(s.mb_per_step)),
                 html('td', {class: 'num'}, String(s.allocations_per_step))))));
  }
  if (m.rss && m.rss.mean_mb != null) {
    parts.push(html('p', {class: 'facts memory-rss'}, `process RSS ${mb(m.rss.mean_mb)} MB a step (mean)`));
  }
  return parts.concat(m.notes && m.notes.length ? [notes(m.notes)] : []);
}

function mb(value) {
  return value == null ? 'n/a' : value.toFixed(3);
}

// The allocator's level through one step as a staircase, over its phases' bands.
function curveChart(curve, colours) {
  const left = 64, right = 10, plotW = 840, plotH = 180, topPad = 14, bottom = 30;
  const width = left + plotW + right, height = topPad + plotH + bottom;
  const chart = svgEl('svg', {class: 'chart memory', width, height, viewBox: `0 0 ${width} ${height}`});
  const end = Math.max(curve.t_ms[curve.t_ms.length - 1], 1e-9);
  const low = Math.min(...curve.allocated_mb), high = Math.max(...curve.allocated_mb);
  const span = Math.max(high - low, 1e-6);
  const xOf = (t) => left + plotW * t / end;
  const yOf = (v) => topPad + plotH - plotH * (v - low) / span;
  for (const [start, stop, phase] of curve.phases) {
    const band = svgEl('rect', {x: xOf(start), y: topPad, width: Math.max(xOf(stop) - xOf(start), 0.5),
                                height: plotH, fill: colours[phase] || '#dddddd', opacity: 0.25,
                                class: `band band-${phase}`});
    band.append(svgEl('title', {}, `${phase}: ${start.toFixed(3)}-${stop.toFixed(3)} ms`));
    chart.append(band);
  }
  let path = `M ${xOf(curve.t_ms[0])} ${yOf(curve.allocated_mb[0])}`;
  for (let i = 1; i < curve.t_ms.length; i++) {
    path += ` H ${xOf(curve.t_ms[i])} V ${yOf(curve.allocated_mb[i])}`;
  }
  chart.append(svgEl('path', {d: path, fill: 'none', stroke: '#222222', 'stroke-width': 1.5,
                              class: 'level'}));
  for (const [v, y] of [[high, topPad], [low, topPad + plotH]]) {
    chart.append(svgEl('text', {x: left - 4, y: y + 4, 'text-anchor': 'end', class: 'axis'}, mb(v)));
  }
  chart.append(svgEl('text', {x: 4, y: 12, class: 'axis'}, 'MB'));
  chart.append(svgEl('text', {x: left + plotW, y: height - 8, 'text-anchor': 'end', class: 'axis'},
                     `${end.toFixed(3)} ms (step ${curve.step})`));
  return chart;
}
