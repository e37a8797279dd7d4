// gapscope's TensorBoard page. It draws the JSON of the plugin's own routes (runs, steps,
// compare: the CLI's analysers, serialised on the server) as tables and hand-written SVG.
// No library and no request outside the plugin, so it renders on a machine without internet.

import {button, getJson, halfWidth, html, legend, ms, notes, originMark, section, signed, svgEl, swatch,
        table, withInterval} from './dom.js';
import {pairPanels, panelSections} from './panels.js';

const KIND_COLOURS = {'warm-up': '#999999', 'traced': '#D55E00', 'unprofiled': '#0072B2'};
const state = {doc: null, selected: null, compared: [], root: null, scale: null, pendingTimer: null};
// Above this ratio of the slowest run's step to the fastest's, bars to scale leave the fast runs
// without a visible bar: the chart opens on each run's shares instead.
const SPREAD_FOR_SHARES = 10;

export async function render() {
  document.head.append(html('link', {rel: 'stylesheet', href: './static/style.css'}));
  state.root = html('main', {class: 'gapscope'});
  document.body.append(state.root);
  await reload();
}

async function reload() {
  state.root.replaceChildren(html('p', {class: 'loading'}, 'reading the runs…'));
  await fetchRuns();
}

// Runs the server has not analysed yet come as pending (it analyses them meanwhile): the page
// asks again each second until none is, redrawing with what has come.
async function fetchRuns() {
  clearTimeout(state.pendingTimer);
  try {
    state.doc = await getJson('./runs?wait=2');
  } catch (error) {
    state.root.replaceChildren(html('p', {class: 'problem'}, `gapscope: ${error.message}`));
    return;
  }
  if (state.doc.pending) state.pendingTimer = setTimeout(fetchRuns, 1000);
  const ok = state.doc.runs.filter((run) => run.breakdown);
  if (!ok.some((run) => run.name === state.selected)) state.selected = ok.length ? ok[0].name : null;
  state.compared = state.compared.filter((name) => ok.some((run) => run.name === name));
  // The default pair is chosen once every run is known: a part of them could pick another.
  if (!state.compared.length && !state.doc.pending) state.compared = defaultCompare(ok);
  draw();
}

// The first two traced runs of one workload: the comparison a user opens gapscope for. In an
// A/B folder, two of its configurations (never two repeats of one), which the server answers
// with the measurement's own comparison, as `gapscope compare FOLDER` does.
function defaultCompare(ok) {
  const traced = ok.filter((run) => run.traced);
  for (const first of traced.filter((run) => run.measurement)) {
    const other = traced.find((run) => run.measurement === first.measurement &&
        run.config !== first.config);
    if (other) return [first.name, other.name];
  }
  for (const first of traced) {
    const other = traced.find((run) => run !== first &&
        run.breakdown.workload === first.breakdown.workload);
    if (other) return [first.name, other.name];
  }
  return [];
}

function draw() {
  const doc = state.doc;
  const header = html('header', {},
      html('h1', {}, 'gapscope'),
      html('span', {class: 'logdir'}, `${doc.runs.length} run(s) in ${doc.logdir}` +
           (doc.pending ? `, ${doc.pending} being analysed` : '')),
      button('reload', reload));
  const sections = [header];
  // What the other tabs of this TensorBoard show offline (and which one is off).
  if (doc.tab_notes && doc.tab_notes.length) {
    sections.push(html('ul', {class: 'notes tab-notes'},
        ...doc.tab_notes.map((line) => html('li', {}, line))));
  }
  sections.push(runsSection(doc));
  if (doc.jobs && doc.jobs.length) sections.push(jobsSection(doc));
  const ok = doc.runs.filter((run) => run.breakdown);
  if (ok.length) sections.push(overviewSection(doc, ok));
  const selected = ok.find((run) => run.name === state.selected);
  if (selected) {
    sections.push(breakdownSection(doc, selected), stepsSection(selected));
    if (selected.traced) sections.push(detailsSection(doc, selected), ...panelSections(selected, doc.colours));
  }
  sections.push(compareSection());
  state.root.replaceChildren(...sections);
}

// ---- runs -------------------------------------------------------------------------------

function runsSection(doc) {
  const rows = doc.runs.map((run) => {
    const b = run.breakdown;
    const pick = html('input', {type: 'checkbox', class: 'compare-pick', 'data-run': run.name,
                                title: run.traced ? 'compare this run' : 'compare needs a traced run'});
    pick.checked = state.compared.includes(run.name);
    pick.disabled = !b || !run.traced;
    pick.addEventListener('change', () => {
      state.compared = pick.checked ? [...state.compared, run.name]
                                    : state.compared.filter((name) => name !== run.name);
      draw();
    });
    const name = b ? html('a', {href: '#', class: 'run-link', 'data-run': run.name}, run.label)
                   : html('span', {}, run.label);
    if (b) name.addEventListener('click', (event) => {
      event.preventDefault();
      state.selected = run.name;
      draw();
    });
    return html('tr', {class: [b ? '' : 'unanalysed', run.name === state.selected ? 'selected' : '']
                                 .join(' ').trim()},
        html('td', {}, pick), html('td', {}, name), html('td', {class: 'path'}, run.name),
        html('td', {}, run.framework || ''),
        html('td', {class: 'num'}, b ? withInterval(b.step_ms.mean, b.step_ms.ci95) + unreliableMark(b) : ''),
        html('td', {class: 'num'}, b ? String(b.steps) : ''),
        html('td', {class: b || run.pending ? 'note' : 'problem'},
             b ? b.step_source : run.pending ? 'being analysed…' : `cannot be analysed: ${run.problem}`));
  });
  return section('runs', 'Runs',
      table(['compare', 'run', 'path', 'framework', 'step ms ±95 %', 'steps', 'step time from'], rows),
      html('p', {class: 'hint'}, 'Click a run for its breakdown and steps; tick two or more to ' +
           'compare them (the first ticked is the baseline).'));
}

// ---- distributed jobs -------------------------------------------------------------------

// Each job: per rank its step, the time it waited on communication and the rest, then the
// CLI's own lines (job step, skew, straggler). Its ranks are runs of the list above.
function jobsSection(doc) {
  const parts = doc.jobs.map((job) => {
    if (!job.job) {
      return html('div', {class: 'job'}, html('h3', {}, job.label),
                  html('p', {class: 'problem'}, `cannot be analysed: ${job.problem}`));
    }
    const j = job.job;
    const rows = j.per_rank.map((r) => {
      const waiting = Object.values(r.waiting_ms).reduce((a, b) => a + b, 0);
      const straggler = j.straggler && j.straggler.rank === r.rank && !j.skew_within_noise;
      return html('tr', {class: straggler ? 'job-rank straggler' : 'job-rank'},
          html('td', {}, `rank ${r.rank}${straggler ? ' (straggler)' : ''}`),
          html('td', {}, r.host || ''),
          html('td', {class: 'num'}, ms(r.step_ms)),
          html('td', {class: 'num'}, ms(waiting)),
          html('td', {class: 'num'}, ms(r.busy_ms)));
    });
    return html('div', {class: 'job', 'data-job': job.name},
        html('h3', {}, `${job.label}: job step ${j.complete === false ? 'at least ' : ''}${withInterval(j.job_step_ms.mean, j.job_step_ms.ci95)} ms`),
        table(['rank', 'host', 'step ms', 'waiting on communication ms', 'not waiting ms'], rows),
        notes(job.lines.slice(2)));
  });
  return section('jobs', 'Distributed jobs', ...parts);
}

// ---- breakdown --------------------------------------------------------------------------

function overviewSection(doc, ok) {
  const steps = ok.map((run) => run.breakdown.step_ms.mean);
  const spread = Math.max(...steps) / Math.max(Math.min(...steps), 1e-9);
  const scale = state.scale || (spread > SPREAD_FOR_SHARES ? 'shares' : 'time');
  const slowest = Math.max(...steps, 1e-9);
  const labelW = 260, barW = 560, rowH = 26, width = labelW + barW + 120;
  const chart = svgEl('svg', {class: `chart overview scale-${scale}`, width,
                              height: ok.length * rowH + 10,
                              viewBox: `0 0 ${width} ${ok.length * rowH + 10}`});
  ok.forEach((run, i) => {
    const y = 5 + i * rowH;
    const step = run.breakdown.step_ms.mean;
    // Long labels (a folder) keep their end, which tells runs apart; the title has all of it.
    const label = svgEl('text', {x: labelW - 8, y: y + rowH / 2 + 4, 'text-anchor': 'end'},
                        run.label.length > 38 ? `…${run.label.slice(-37)}` : run.label);
    label.append(svgEl('title', {}, `${run.label}: ${run.name}`));
    chart.append(label);
    // To scale: ms per step on one axis. Shares: each run's step is the full bar.
    const pxPerMs = barW / (scale === 'shares' ? Math.max(step, 1e-9) : slowest);
    stackedBar(chart, doc, run.breakdown, labelW, y + 3, pxPerMs, rowH - 8);
    chart.append(svgEl('text', {x: labelW + pxPerMs * step + 6, y: y + rowH / 2 + 4},
                       `${ms(step)} ms`));
  });
  const choices = [['time', 'to scale (ms per step)'], ['shares', 'each run 100 % (phase shares)']];
  const picker = html('span', {class: 'scale-picker'}, 'bars: ', ...choices.map(([value, text]) => {
    const option = html('label', {}, html('input', {type: 'radio', name: 'overview-scale', value}), text);
    const input = option.firstChild;
    input.checked = value === scale;
    input.addEventListener('change', () => { state.scale = value; draw(); });
    return option;
  }));
  const why = scale === 'shares' && !state.scale
      ? html('p', {class: 'hint'}, `The slowest step is ${spread.toFixed(0)}× the fastest: ` +
             'to scale, the fast runs would have no visible bar.') : null;
  return section('overview', scale === 'shares'
      ? 'Phases per run (share of each run\'s steady-state step; the figure is its ms per step)'
      : 'Phases per run (ms per steady-state step, to scale)',
      legend(doc.phases.map((p) => [p, doc.colours[p]])), picker, why, chart);
}

function breakdownSection(doc, run) {
  const b = run.breakdown;
  const width = 900;
  const chart = svgEl('svg', {class: 'chart breakdown', width, height: 44, viewBox: `0 0 ${width} 44`});
  stackedBar(chart, doc, b, 0, 4, width / Math.max(b.step_ms.mean, 1e-9), 36, true);
  const rows = doc.phases.map((phase) => {
    const f = b.phases[phase];
    return html('tr', {},
        html('td', {}, swatch(doc.colours[phase]), phase),
        html('td', {class: 'num'}, ms(f.ms)), html('td', {class: 'num'}, halfWidth(f.ms, f.ci95)),
        html('td', {class: 'num'}, `${(100 * f.share).toFixed(1)} %`),
        html('td', {}, f.source + originMark(b.phase_sources[phase])),
        html('td', {class: 'num'}, f.trace_ms == null ? '' : ms(f.trace_ms)));
  });
  // other's parts, by what the host did meanwhile (in the trace's proportions)
  for (const [part, value] of Object.entries(b.phases.other.parts || {})) {
    rows.push(html('tr', {class: 'other-part'},
        html('td', {}, `· ${part}`), html('td', {class: 'num'}, ms(value)), html('td', {}, ''),
        html('td', {class: 'num'}, `${(100 * value / b.step_ms.mean).toFixed(1)} %`),
        html('td', {}, 'trace proportions'), html('td', {}, '')));
  }
  rows.push(html('tr', {class: 'total'},
      html('td', {}, 'step'), html('td', {class: 'num step-mean'}, ms(b.step_ms.mean)),
      html('td', {class: 'num'}, halfWidth(b.step_ms.mean, b.step_ms.ci95)),
      html('td', {class: 'num'}, '100.0 %'), html('td', {}, b.step_source + unreliableMark(b)),
      html('td', {}, '')));
  const facts = [`${b.steps} steps`, `median ${ms(b.step_ms.median)} ms`,
                 `p10–p90 ${ms(b.step_ms.p10)}–${ms(b.step_ms.p90)} ms`];
  if (b.compile_ms != null) facts.push(`compile (once) ${ms(b.compile_ms)} ms`);
  if (b.trace_overhead_pct != null) facts.push(`traced steps ${signed(b.trace_overhead_pct, 0)} %`);
  return section('breakdown', `Breakdown: ${run.label}`,
      html('p', {class: 'facts'}, [b.framework, b.device, b.run_id].filter(Boolean).join(' · ')),
      chart,
      table(['phase', 'ms', '±95 %', '% of step', 'source', 'in the trace ms'], rows),
      html('p', {class: 'facts'}, facts.join(' · ')),
      notes(b.notes));
}

// A step time measured beside a busy machine (or in two states) is no fact: say so where it stands.
function unreliableMark(b) {
  return b.reliable === false ? ' (unreliable: see the warnings)' : '';
}

function stackedBar(chart, doc, b, x0, y, pxPerMs, height, labelled = false) {
  let x = x0;
  for (const phase of doc.phases) {
    const value = b.phases[phase].ms;
    const w = Math.max(0, value) * pxPerMs;  // a negative `other` (noise) takes no room
    if (w <= 0) continue;
    const rect = svgEl('rect', {x, y, width: w, height, fill: doc.colours[phase],
                                class: `phase phase-${phase}`});
    rect.append(svgEl('title', {}, `${phase} ${ms(value)} ms (${(100 * b.phases[phase].share).toFixed(1)} %)`));
    chart.append(rect);
    if (labelled && w > 70) {
      chart.append(svgEl('text', {x: x + 4, y: y + height / 2 + 4, class: 'on-bar'}, phase));
    }
    x += w;
  }
}

// ---- steps ------------------------------------------------------------------------------

function stepsSection(run) {
  const box = section('steps', `Steps over time: ${run.label}`, html('p', {class: 'loading'}, '…'));
  getJson(`./steps?run=${encodeURIComponent(run.name)}`).then((doc) => {
    if (doc.problem) {
      box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, doc.problem));
      return;
    }
    box.replaceChildren(box.firstChild, stepsChart(doc));
  }).catch((error) => {
    box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, error.message));
  });
  return box;
}

function stepsChart(doc) {
  const steps = doc.steps;
  const counts = {};
  for (const s of steps) counts[s.kind] = (counts[s.kind] || 0) + 1;
  // Warm-up steps (compile) can be thousands of times a steady step: cap the axis at the
  // steady steps and print a clipped bar's value above it.
  const steady = steps.filter((s) => s.kind !== 'warm-up').map((s) => s.step_ms);
  const top = 1.15 * Math.max(...(steady.length ? steady : steps.map((s) => s.step_ms)), 1e-9);
  const left = 56, right = 10, plotW = 840, plotH = 200, topPad = 18, bottom = 30;
  const width = left + plotW + right, height = topPad + plotH + bottom;
  const chart = svgEl('svg', {class: 'chart steps', width, height, viewBox: `0 0 ${width} ${height}`});
  const slot = plotW / Math.max(steps.length, 1);
  const yOf = (v) => topPad + plotH - plotH * Math.min(v, top) / top;
  shadeRuns(chart, steps, 'warm-up', left, slot, topPad, plotH);
  shadeRuns(chart, steps, 'traced', left, slot, topPad, plotH);
  for (let i = 0; i <= 4; i++) {
    const v = top * i / 4, y = yOf(v);
    chart.append(svgEl('line', {x1: left, x2: left + plotW, y1: y, y2: y, class: 'grid'}));
    chart.append(svgEl('text', {x: left - 4, y: y + 4, 'text-anchor': 'end', class: 'axis'},
                       v.toFixed(v < 10 ? 2 : 0)));
  }
  steps.forEach((s, i) => {
    const x = left + i * slot, y = yOf(s.step_ms);
    const rect = svgEl('rect', {x: x + slot * 0.1, y, width: Math.max(slot * 0.8, 1),
                                height: topPad + plotH - y, fill: KIND_COLOURS[s.kind],
                                class: `step step-${s.kind}`});
    rect.append(svgEl('title', {}, `step ${s.step} (${s.kind}): ${ms(s.step_ms)} ms`));
    chart.append(rect);
    if (s.step_ms > top) {
      chart.append(svgEl('text', {x: x + slot / 2, y: topPad - 4, 'text-anchor': 'middle',
                                  class: 'clipped'}, `${ms(s.step_ms)}`));
    }
  });
  const every = Math.max(1, Math.ceil(steps.length / 12));
  steps.forEach((s, i) => {
    if (i % every) return;
    chart.append(svgEl('text', {x: left + (i + 0.5) * slot, y: topPad + plotH + 16,
                                'text-anchor': 'middle', class: 'axis'}, String(s.step)));
  });
  chart.append(svgEl('text', {x: 4, y: 12, class: 'axis'}, 'ms'));
  const caption = [`${steps.length} steps from ${doc.source}`];
  if (doc.compile_ms != null) caption.push(`compile (once, in the warm-up) ${ms(doc.compile_ms)} ms`);
  return html('div', {},
      legend(Object.entries(KIND_COLOURS).filter(([kind]) => counts[kind])
             .map(([kind, colour]) => [`${kind} (${counts[kind]})`, colour])),
      chart, html('p', {class: 'facts'}, caption.join(' · ')));
}

// A light band behind each stretch of consecutive steps of one kind (the warm-up, the window
// the profiler traced), labelled once.
function shadeRuns(chart, steps, kind, left, slot, top, height) {
  let start = null;
  steps.forEach((s, i) => {
    const inside = s.kind === kind;
    if (inside && start === null) start = i;
    if (start !== null && (!inside || i === steps.length - 1)) {
      const end = inside ? i + 1 : i;
      chart.append(svgEl('rect', {x: left + start * slot, y: top, width: (end - start) * slot,
                                  height, class: `band band-${kind}`}));
      chart.append(svgEl('text', {x: left + start * slot + 3, y: top + 12, class: 'band-label'},
                         kind === 'traced' ? 'traced window' : kind));
      start = null;
    }
  });
}

// ---- compare ----------------------------------------------------------------------------

function compareSection() {
  const names = state.compared;
  const box = section('compare', 'Compare');
  if (names.length < 2) {
    box.append(html('p', {class: 'hint'}, 'Tick two or more traced runs above to compare them.'));
    return box;
  }
  box.append(html('p', {class: 'loading'}, 'comparing…'));
  const query = names.map((name) => `run=${encodeURIComponent(name)}`).join('&');
  getJson(`./compare?${query}`).then((doc) => {
    box.replaceChildren(box.firstChild, ...(doc.error
        ? [html('p', {class: 'problem'}, `cannot compare: ${doc.error}`)]
        : comparison(doc)));
  }).catch((error) => {
    box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, error.message));
  });
  return box;
}

function comparison(doc) {
  const parts = [html('ul', {class: 'verdicts'}, ...doc.verdicts.map((line) => html('li', {}, line)))];
  for (const [i, pair] of doc.comparisons.entries()) {
    // The Δ cells and verdicts as the CLI's table writes them (views.table_cells): one answer.
    const cells = doc.cells[i];
    const rows = Object.entries(pair.phases).map(([phase, g]) => html('tr', {},
        html('td', {}, swatch(state.doc.colours[phase]), phase),
        html('td', {class: 'num'}, ms(g.a_ms)), html('td', {class: 'num'}, ms(g.b_ms)),
        html('td', {class: 'num'}, cells.phases[phase].delta),
        html('td', {class: 'num'}, g.share_of_gap == null ? '' : `${(100 * g.share_of_gap).toFixed(0)} %`),
        html('td', {}, cells.phases[phase].verdict)));
    const sum = Object.values(pair.phases).reduce((total, g) => total + g.delta_ms, 0);
    rows.push(html('tr', {class: 'total'},
        html('td', {}, 'step (the gap)'), html('td', {class: 'num'}, ms(pair.a_step_ms)),
        html('td', {class: 'num'}, ms(pair.b_step_ms)),
        html('td', {class: 'num gap'}, cells.step.delta),
        html('td', {class: 'num'}, pair.gap_ms ? '100 %' : ''),
        html('td', {}, cells.step.verdict)));
    parts.push(html('h3', {}, `${pair.b_label} against ${pair.a_label} (baseline)`),
        deltaChart(pair),
        table(['phase', `${pair.a_label} ms`, `${pair.b_label} ms`,
               'Δ ms ± 95 % ([low, high] where lopsided; ~ within noise)', '% of gap', 'verdict'], rows),
        html('p', {class: 'facts'}, `the phase Δs add up to ${signed(sum, 3)} ms = the gap; ` +
             `ratio ${pair.ratio == null ? 'n/a' : pair.ratio.toFixed(3)}× (run / baseline); ` +
             `intervals: ${pair.interval_method}`),
        html('h4', {}, 'evidence'),
        html('ul', {class: 'evidence'}, ...pair.evidence.map((e) => html('li', {}, e.text))));
    // A slower compiled run's graph breaks and recompiles lead: what to fix before any variant.
    const lead = pair.compile_behind ? [html('li', {class: 'compile-behind'}, pair.compile_behind.text)] : [];
    if (pair.suggestions.length || lead.length) {
      parts.push(html('h4', {}, 'suggestions (hypotheses: gapscope compare --check-suggestions measures them)'),
          html('ul', {class: 'suggestions'}, ...lead, ...pair.suggestions.map((s) => html('li', {}, s.text))));
    }
    parts.push(...pairPanels(doc.panels && doc.panels[i]));
  }
  return parts.concat(notes(doc.warnings.map((w) => `warning: ${w}`)));
}

// Each phase's delta as a bar from zero with its interval as a whisker; the gap below them.
function deltaChart(pair) {
  const entries = Object.entries(pair.phases).map(([phase, g]) => [phase, g.delta_ms, g.delta_ci95]);
  entries.push(['gap', pair.gap_ms, pair.gap_ci95]);
  const reach = Math.max(...entries.flatMap(([, d, ci]) => [Math.abs(d), ...(ci || []).map(Math.abs)]), 1e-9);
  const labelW = 90, half = 300, rowH = 22, width = labelW + 2 * half + 90;
  const height = entries.length * rowH + 8;
  const chart = svgEl('svg', {class: 'chart deltas', width, height, viewBox: `0 0 ${width} ${height}`});
  const zero = labelW + half, px = half / reach;
  chart.append(svgEl('line', {x1: zero, x2: zero, y1: 0, y2: height, class: 'zero'}));
  entries.forEach(([name, delta, ci], i) => {
    const y = 4 + i * rowH;
    chart.append(svgEl('text', {x: labelW - 6, y: y + 14, 'text-anchor': 'end'}, name));
    const fill = name === 'gap' ? '#444444' : state.doc.colours[name];
    const rect = svgEl('rect', {x: Math.min(zero, zero + delta * px), y: y + 3,
                                width: Math.max(Math.abs(delta) * px, 1), height: rowH - 8,
                                fill, class: `delta delta-${name}`});
    rect.append(svgEl('title', {}, `${name} ${signed(delta, 3)} ms`));
    chart.append(rect);
    if (ci) {
      chart.append(svgEl('line', {x1: zero + ci[0] * px, x2: zero + ci[1] * px,
                                  y1: y + rowH / 2 - 1, y2: y + rowH / 2 - 1, class: 'whisker'}));
    }
    chart.append(svgEl('text', {x: labelW + 2 * half + 6, y: y + 14}, `${signed(delta, 3)} ms`));
  });
  return chart;
}

// ---- kernels, compile, transfers, resources of one run -----------------------------------

function detailsSection(doc, run) {
  const box = section('details', `Kernels, compile, transfers, resources: ${run.label}`,
                      html('p', {class: 'loading'}, '…'));
  getJson(`./details?run=${encodeURIComponent(run.name)}`).then((d) => {
    if (d.problem) {
      box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, d.problem));
      return;
    }
    box.replaceChildren(box.firstChild, ...details(doc, d));
  }).catch((error) => {
    box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, error.message));
  });
  return box;
}

function details(doc, d) {
  const k = d.kernels, at = d.attribution, c = d.compile, t = d.transfers, r = d.resources;
  const phases = Object.keys(at.host_ms);
  const perPhase = phases.map((phase) => html('tr', {},
      html('td', {}, doc.colours[phase] ? swatch(doc.colours[phase]) : '', phase),
      html('td', {class: 'num'}, (k.per_phase[phase] || 0).toFixed(1)),
      html('td', {class: 'num'}, ms(k.time_ms_per_phase[phase] || 0)),
      html('td', {class: 'num'}, ms(at.host_ms[phase])),
      html('td', {class: 'num'}, ms(at.device_ms[phase] || 0))));
  const top = k.top.map((w) => html('tr', {class: 'top-kernel'},
      html('td', {class: 'kernel-name'}, w.name), html('td', {}, w.phase),
      html('td', {class: 'num'}, w.calls_per_step.toFixed(1)),
      html('td', {class: 'num'}, w.mean_us.toFixed(1)), html('td', {class: 'num'}, ms(w.ms_per_step)),
      html('td', {}, w.fused ? 'fused' : '')));
  const pct = (v) => v == null ? 'n/a' : `${(100 * v).toFixed(0)} %`;
  const compile = [`first step ${ms(c.first_step_ms)} ms`, `steady median ${ms(c.steady_median_ms)} ms`,
                   `warm-up beyond steady ${ms(c.warmup_excess_ms)} ms`,
                   `compiling in steady steps ${ms(c.compile_in_window_ms)} ms`,
                   `compiled-region calls/step ${c.compiled_calls_per_step.toFixed(1)}`,
                   `guards ${(1000 * c.guard_ms_per_step).toFixed(1)} µs/step`,
                   `tf.function tracing count ${c.tf_tracing_count ?? 'n/a'}`,
                   `XLA programs ${c.xla_modules.length}`];
  const transfers = t.note ? [t.note] : Object.entries(t.by_direction).map(([way, x]) =>
      `${way}: ${x.count_per_step.toFixed(1)}/step, ${(x.bytes_per_step / 1e3).toFixed(0)} kB/step`);
  const resources = [`CPU load mean ${r.cpu_percent_mean == null ? 'n/a' : r.cpu_percent_mean.toFixed(0) + ' %'}`,
                     `max ${r.cpu_percent_max == null ? 'n/a' : r.cpu_percent_max.toFixed(0) + ' %'}`,
                     `GPU util ${r.gpu_util_percent_mean == null ? 'n/a' : r.gpu_util_percent_mean.toFixed(0) + ' %'}`,
                     `GPU power ${r.gpu_power_w_mean == null ? 'n/a' : r.gpu_power_w_mean.toFixed(0) + ' W'}`];
  return [
    html('p', {class: 'facts'}, `${k.per_step.toFixed(1)} ${k.source} per step, mean ` +
         `${k.mean_us == null ? 'n/a' : k.mean_us.toFixed(1)} µs; fused ${pct(k.fused_share)} of them, ` +
         `${pct(k.fused_time_share)} of their time; summed ${ms(k.time_ms_per_step)} ms, busy ` +
         `(threads merged) ${ms(at.device_busy_ms)} ms per step`),
    html('h4', {}, 'per phase (ms per step)'),
    table(['phase', 'kernels', 'kernel time summed', 'host', 'device (busy)'], perPhase),
    html('h4', {}, 'top kernels'),
    table(['kernel', 'phase', 'calls/step', 'mean µs', 'ms/step', ''], top),
    html('h4', {}, 'compile'), html('p', {class: 'facts compile'}, compile.join(' · ')),
    html('h4', {}, 'transfers'), html('p', {class: 'facts transfers'}, transfers.join(' · ')),
    html('h4', {}, 'resources'), html('p', {class: 'facts resources'}, [...resources, r.note].filter(Boolean).join(' · ')),
    notes([...k.notes, ...at.notes, ...c.notes]),
  ];
}
