// gapscope's Layers and Compile views (and where the Memory view goes). The figures come computed from the plugin's routes
// (analysis/results/panels: one run's in /details, a pair's in /compare); this only draws them.

import {getJson, html, ms, notes, section, signed, table} from './dom.js';
import {memoryView} from './memory.js';

// Per run: its layers, its compile record and its memory, from the run's /details document.
export function panelSections(run, colours) {
  const layers = section('layers', `Layers: ${run.label}`, html('p', {class: 'loading'}, '…'));
  const compile = section('compile', `Compile: ${run.label}`, html('p', {class: 'loading'}, '…'));
  const memory = section('memory', `Memory: ${run.label}`, html('p', {class: 'loading'}, '…'));
  const boxes = [layers, compile, memory];
  getJson(`./details?run=${encodeURIComponent(run.name)}`).then((d) => {
    if (d.problem || !d.panels) {
      const why = d.problem || 'no layers, compile or memory figures';
      for (const box of boxes) box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, why));
      return;
    }
    layers.replaceChildren(layers.firstChild, ...layerView(d.panels.layers));
    compile.replaceChildren(compile.firstChild, ...compileView(d.panels.compile));
    memory.replaceChildren(memory.firstChild, ...memoryView(d.panels.memory, colours));
  }).catch((error) => {
    for (const box of boxes) {
      box.replaceChildren(box.firstChild, html('p', {class: 'problem'}, error.message));
    }
  });
  return boxes;
}

// Per compared pair: the layers lined up and where compiling pays.
export function pairPanels(panel) {
  if (!panel) return [];
  const parts = [html('h4', {}, 'layers'), ...layerView(panel.layers)];
  const pays = panel.compile.amortisation;
  if (pays) parts.push(html('h4', {}, 'compile'), html('p', {class: 'facts amortisation'}, pays.text));
  return parts;
}

function num(value, digits = 3) {
  return value == null ? '-' : value.toFixed(digits);
}

function share(value) {
  return value == null ? '-' : `${(100 * value).toFixed(1)} %`;
}

// One run: a row per layer. Two: each figure once per run, side by side, and the deltas of
// the layers both have; a layer only one run has reads "not matched" on the other side.
function layerView(p) {
  const kernels = (p.kernels || []).flatMap(kernelView);
  if (p.note && !p.rows.length) return [html('p', {class: 'note layers-note'}, p.note), ...kernels];
  const two = p.runs.length === 2;
  const side = (cell, key, digits) => cell ? num(cell[key], digits) : 'not matched';
  const rows = p.rows.map((row) => {
    const cells = [html('td', {}, row.name)];
    for (const [key, digits] of [['forward_ms', 3], ['backward_ms', 3]]) {
      for (const cell of row.sides) cells.push(html('td', {class: 'num'}, side(cell, key, digits)));
      if (two) {
        const phase = key.replace('_ms', '');
        cells.push(html('td', {class: 'num'}, row.delta_ms ? signed(row.delta_ms[phase], 3) : ''));
      }
    }
    // Two runs of one spec count the same GFLOP: the single-run view lists them.
    for (const key of two ? [] : ['forward_gflop', 'backward_gflop']) {
      for (const cell of row.sides) cells.push(html('td', {class: 'num'}, side(cell, key, 4)));
    }
    // Two runs: backward's GFLOP/s only, as the terminal's compare table (the gap is mostly there).
    for (const key of two ? ['backward_gflops'] : ['forward_gflops', 'backward_gflops']) {
      for (const cell of row.sides) cells.push(html('td', {class: 'num'}, side(cell, key, 1)));
    }
    for (const cell of row.sides) cells.push(html('td', {class: 'num'}, cell ? share(cell.share) : 'not matched'));
    for (const cell of row.sides) cells.push(html('td', {class: 'fused'}, cell ? cell.fused || '-' : 'not matched'));
    return html('tr', {class: row.matched === false ? 'layer-row unmatched' : 'layer-row',
                       'data-layer': row.name}, ...cells);
  });
  const totals = (label, figures, cls) => {
    const cells = [html('td', {}, label)];
    for (const phase of ['forward', 'backward']) {
      for (const f of figures) cells.push(html('td', {class: 'num'}, f ? num(f[phase]) : 'no layers'));
      // A phase a run cannot split by layer (an inference trace's backward) is null there.
      const both = two && figures[0] && figures[1] && figures[0][phase] != null && figures[1][phase] != null;
      if (two) cells.push(html('td', {class: 'num'}, both ? signed(figures[1][phase] - figures[0][phase], 3) : ''));
    }
    const rest = 6;  // the cells after the times: one run GFLOP, GFLOP/s, share, fused; two runs 3 pairs
    for (let i = 0; i < rest; i++) cells.push(html('td', {}, ''));
    return html('tr', {class: cls}, ...cells);
  };
  rows.push(totals('outside layers', p.outside, 'layers-outside'),
            totals('phase (traced)', p.phase, 'total layers-phase'));
  // Two runs: A and B in the headings (the labels once, above), so the table fits the page.
  const per = (name) => two ? [`${name} A`, `${name} B`] : [name];
  const head = two
      ? ['layer', ...per('fwd'), 'Δ fwd', ...per('bwd'), 'Δ bwd', ...per('bwd GFLOP/s'),
         ...per('share'), ...per('fused')]
      : ['layer', 'fwd ms', 'bwd ms', 'fwd GFLOP', 'bwd GFLOP', 'fwd GFLOP/s', 'bwd GFLOP/s',
         'share', 'fused ops'];
  const facts = two ? [`A: ${p.runs[0]}, B: ${p.runs[1]}; fwd, bwd and Δ in ms`,
                       p.matched_by ? `layers matched by ${p.matched_by}` : p.note] : [];
  return [html('p', {class: 'facts layers-facts'},
               [...facts, 'ms per traced step (profiler cost inside); share: of the traced ' +
                'forward and backward; GFLOP counted from the layer shapes'].filter(Boolean).join(' · ')),
          table(head, rows), ...optimizerLines(p.optimizer), notes(p.notes), ...kernels];
}

// torch: each layer's parameter updates inside the optimizer's step, one line per run.
function optimizerLines(runs) {
  return (runs || []).map((o) => html('p', {class: 'facts optimizer-layers'},
      `${o.run}: optimizer per layer (${o.source}, ms per traced step): ` +
      Object.entries(o.layers).map(([name, value]) => `${name} ${num(value)}`).join(', ') +
      `; outside layers ${num(o.outside_ms)}`));
}

// A GPU run's device kernels by layer: kernels and busy µs a step per phase, GFLOP/s where no
// mixed kernel may belong to the layer; then the mixed ones with the layers they fit.
function kernelView(k) {
  const cells = (group) => ['forward', 'backward'].flatMap((phase) => [
      html('td', {class: 'num'}, String(group[phase].kernels)),
      html('td', {class: 'num'}, num(group[phase].ms * 1000, 1)),
      html('td', {class: 'num'}, num(group[phase].gflops, 1))]);
  const rows = k.layers.map((row) => html('tr', {class: 'kernel-row', 'data-layer': row.name},
                                          html('td', {}, row.name), ...cells(row)));
  for (const [label, key] of [['mixed', 'mixed'], ['outside layers', 'outside']]) {
    rows.push(html('tr', {class: `kernel-row kernels-${key}`, 'data-layer': key},
                   html('td', {}, label), ...cells(k[key])));
  }
  const mixed = ['forward', 'backward'].flatMap((phase) => Object.entries(k.mixed[phase].fits).map(
      ([name, fits]) => `mixed in ${phase}: ${name.split('(')[0]} (${fits.join(' or ')})`));
  const placed = Object.entries(k.placed_by).map(([how, n]) => `${how} ${n}`).join(', ');
  const what = k.source === 'device kernels' ? 'device kernels' : 'CPU kernels';
  return [html('h4', {}, `${what} by layer: ${k.run}`),
          html('p', {class: 'facts kernels-facts'}, 'kernels and µs of device busy time per ' +
               `traced step, by the layer whose op launched them; placed by ${placed}` +
               (k.peak ? `; peak: ${k.peak.method}` : '')),
          table(['layer', 'fwd kernels', 'fwd µs', 'fwd GFLOP/s', 'bwd kernels', 'bwd µs',
                 'bwd GFLOP/s'], rows),
          notes([...mixed, ...k.notes])];
}

function compileView(c) {
  if (c.note) return [html('p', {class: 'note compile-note'}, c.note)];
  const stages = c.stages.map((s) => html('tr', {class: 'compile-stage'},
      html('td', {}, s.name), html('td', {class: 'num'}, ms(s.ms)), html('td', {class: 'num'}, share(s.share))));
  if (c.unattributed_ms != null) {
    stages.push(html('tr', {class: 'compile-stage'}, html('td', {}, 'unattributed'),
        html('td', {class: 'num'}, ms(c.unattributed_ms)),
        html('td', {class: 'num'}, share(c.measured_ms ? c.unattributed_ms / c.measured_ms : null))));
  }
  stages.push(html('tr', {class: 'total'}, html('td', {}, 'measured (warm-up beyond a steady step)'),
      html('td', {class: 'num'}, ms(c.measured_ms)), html('td', {}, '')));
  const parts = [html('p', {class: 'facts compile-line'}, c.line),
                 html('h4', {}, 'compile time by stage (ms, once)'),
                 table(['stage', 'ms', 'of measured'], stages)];
  const listed = [
    ['graph breaks', c.graph_breaks, ['reason', 'place', 'logged', 'first step'],
     (b) => [b.reason, b.place, String(b.times_logged), String(b.first_step)], 'graph-break'],
    ['recompiles', c.recompiles, ['failed guard', 'function', 'place', 'step'],
     (r) => [r.guard, r.function || '', r.place, String(r.step)], 'recompile'],
    ['retraces', c.retraces, ['function', 'step', 'reason'],
     (r) => [r.function, String(r.step), r.reason], 'retrace'],
    ['steps left out of the steady state, compiling', c.steady_events || [], ['step', 'what compiled'],
     (e) => [String(e.step), e.what], 'steady-event'],
  ];
  for (const [title, items, head, cells, cls] of listed) {
    parts.push(html('h4', {}, `${title} (${items.length})`));
    if (items.length) {
      parts.push(table(head, items.map((item) => html('tr', {class: cls},
          ...cells(item).map((text) => html('td', {}, text))))));
    }
  }
  return parts.concat(notes(c.unseen));
}
