// The HTML report's charts: html_report.cpp inlines this file after the data
// (JSON in #report-data). Plain SVG and DOM calls, no library, so the report
// stays one offline file. Every chart marks its container with data-drawn
// (how many marks it drew) so tests/tools/html_report_browser_test.py can
// tell that each one rendered; names reach the page only as textContent.
(function() {
'use strict';

// Taken from the parser rather than spelled out, so the page holds no URL.
const SVG_NS = (function() {
  const probe = document.createElement('div');
  probe.innerHTML = '<svg></svg>';
  return probe.firstChild.namespaceURI;
})();
const PALETTE = [
  '#4e79a7', '#f28e2b', '#e15759', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#ff9da7', '#9c755f', '#17becf',
  '#7f7f7f', '#bcbd22'
];
const BYTE_UNITS = [[1099511627776, 'TiB'], [1073741824, 'GiB'], [1048576, 'MiB'], [1024, 'KiB'], [1, 'B']];
// [divisor, name, from]: minutes only from five of them, so a two-minute
// trace reads "90 s", not "1.5 min".
const TIME_UNITS = [[60e6, 'min', 300e6], [1e6, 's'], [1e3, 'ms'], [1, 'µs']];

function colour(policy) { return PALETTE[policy % PALETTE.length]; }

function svg(name, attrs, parent) {
  const node = document.createElementNS(SVG_NS, name);
  for (const key in attrs) node.setAttribute(key, attrs[key]);
  if (parent) parent.appendChild(node);
  return node;
}

function svgText(parent, x, y, text, attrs) {
  const node = svg('text', Object.assign({x: x, y: y}, attrs || {}), parent);
  node.textContent = text;
  return node;
}

function tag(name, className, text, parent) {
  const node = document.createElement(name);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them.
function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= raw) || 10 * power;
  const ticks = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : Number(v.toPrecision(12)));
  }
  return ticks;
}

function unitFor(value, units) {
  for (const unit of units) {
    if (Math.abs(value) >= (unit.length > 2 ? unit[2] : unit[0])) return unit;
  }
  return units[units.length - 1];
}

function formatNumber(x) {
  const a = Math.abs(x);
  return x.toFixed(a === 0 || a >= 100 ? 0 : a >= 10 ? 1 : 2);
}

function formatBytes(bytes) {
  const unit = unitFor(bytes, BYTE_UNITS);
  return (unit[1] === 'B' ? String(Math.round(bytes)) : formatNumber(bytes / unit[0])) + ' ' + unit[1];
}

function formatTime(us) {
  const unit = unitFor(us, TIME_UNITS);
  return formatNumber(us / unit[0]) + ' ' + unit[1];
}

function formatCount(n) { return Math.round(n).toLocaleString('en-US'); }

// Where policies differ by a few MiB out of GiB: MiB with four or more
// significant digits, so "2,444 MiB" and "2,446 MiB" stay apart.
function formatMiB(bytes) {
  if (bytes < 1048576) return formatBytes(bytes);
  const mib = bytes / 1048576;
  return mib.toLocaleString('en-US', {maximumFractionDigits: mib >= 1000 ? 0 : 1}) + ' MiB';
}

function shortCount(n) {
  if (n >= 1e6) return n / 1e6 + 'M';
  if (n >= 1e3) return n / 1e3 + 'k';
  return String(n);
}

// Axis ticks for a quantity in `units`: the unit is the one of the top of
// the range, so every label of an axis shares it.
function unitTicks(lo, hi, count, units) {
  const unit = unitFor(Math.max(Math.abs(lo), Math.abs(hi)), units);
  return {unit: unit, ticks: niceTicks(lo / unit[0], hi / unit[0], count).map(v => v * unit[0])};
}

function tickLabel(value, unit) {
  const x = value / unit[0];
  const text = Number.isInteger(x) ? String(x) : String(Number(x.toPrecision(6)));
  return text + ' ' + unit[1];
}

// The trace's runs, best first: fewest failed allocations, then the
// lowest peak reserved (for the same live bytes: the highest utilization).
function rank(trace) {
  const order = trace.runs.map((r, i) => i);
  order.sort((a, b) => {
    const ra = trace.runs[a];
    const rb = trace.runs[b];
    return ra.failed - rb.failed || rb.util - ra.util || ra.peak_reserved - rb.peak_reserved || a - b;
  });
  return order;
}

// The last index whose time is at most `t` (0 when there is none).
function indexAt(times, t) {
  let lo = 0;
  let hi = times.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (times[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

function makeTooltip(container) {
  const tip = tag('div', 'tooltip', null, container);
  return {
    node: tip,
    show(rows, x, y) {
      tip.textContent = '';
      for (const row of rows) {
        const line = tag('div', 'row', null, tip);
        const left = tag('span', null, null, line);
        if (row.colour) {
          const swatch = tag('span', 'swatch', null, left);
          swatch.style.background = row.colour;
        } else if (row.swatch) {
          tag('span', 'swatch ' + row.swatch, null, left);
        }
        left.appendChild(document.createTextNode(row.label));
        if (row.value !== undefined) tag('b', null, row.value, line);
      }
      tip.style.display = 'block';
      const width = tip.offsetWidth;
      const room = container.clientWidth;
      tip.style.left = (x + 14 + width > room ? Math.max(0, x - 14 - width) : x + 14) + 'px';
      tip.style.top = Math.max(0, y - 10) + 'px';
    },
    hide() { tip.style.display = 'none'; },
  };
}

// Drag to select, double-click to reset: the handlers a zoomable plot
// shares. `onZoom(x0px, x1px, y0px, y1px, rectangle)` gets the selection.
function dragZoom(overlay, plot, layer, onZoom, onReset, vertical) {
  let start = null;
  let box = null;
  const point = ev => {
    const r = overlay.getBoundingClientRect();
    return [Math.min(Math.max(ev.clientX - r.left, 0), r.width), Math.min(Math.max(ev.clientY - r.top, 0), r.height)];
  };
  overlay.addEventListener('mousedown', ev => {
    if (ev.button !== 0) return;
    ev.preventDefault();
    start = point(ev);
    box = svg('rect', {class: 'selection', x: plot.x + start[0], y: plot.y, width: 0, height: plot.h}, layer);
  });
  window.addEventListener('mousemove', ev => {
    if (!start) return;
    const p = point(ev);
    const rectangle = vertical && Math.abs(p[1] - start[1]) > 12;
    box.setAttribute('x', plot.x + Math.min(p[0], start[0]));
    box.setAttribute('width', Math.abs(p[0] - start[0]));
    box.setAttribute('y', plot.y + (rectangle ? Math.min(p[1], start[1]) : 0));
    box.setAttribute('height', rectangle ? Math.abs(p[1] - start[1]) : plot.h);
  });
  window.addEventListener('mouseup', ev => {
    if (!start) return;
    const p = point(ev);
    const from = start;
    start = null;
    box.remove();
    if (Math.abs(p[0] - from[0]) < 5) return;
    const rectangle = vertical && Math.abs(p[1] - from[1]) > 12;
    onZoom(
        Math.min(p[0], from[0]), Math.max(p[0], from[0]), Math.min(p[1], from[1]), Math.max(p[1], from[1]), rectangle);
  });
  overlay.addEventListener('dblclick', ev => {
    ev.preventDefault();
    onReset();
  });
}

// Drag to zoom along x, double-click or `reset` to go back: `domain()` gives
// the x range drawn now, `apply` takes the new zoom ({x0, x1}, or null).
function zoomAlongX(overlay, plot, layer, reset, domain, apply) {
  const clear = () => apply(null);
  dragZoom(overlay, plot, layer, (a, b) => {
    const [x0, x1] = domain();
    const x = px => x0 + (x1 - x0) * px / plot.w;
    apply({x0: x(a), x1: x(b)});
  }, clear, false);
  reset.addEventListener('click', clear);
}

function toolbar(container, hint) {
  const bar = tag('div', 'toolbar', null, container);
  tag('span', null, hint, bar);
  const reset = tag('button', null, 'reset zoom', bar);
  reset.type = 'button';
  reset.hidden = true;
  return reset;
}

function axisBottom(layer, plot, ticks, label) {
  const g = svg('g', {class: 'axis'}, layer);
  svg('line', {x1: plot.x, x2: plot.x + plot.w, y1: plot.y + plot.h, y2: plot.y + plot.h}, g);
  for (const t of ticks) {
    svg('line', {x1: t.x, x2: t.x, y1: plot.y + plot.h, y2: plot.y + plot.h + 4}, g);
    svgText(g, t.x, plot.y + plot.h + 15, t.text, {'text-anchor': 'middle'});
  }
  if (label) svgText(g, plot.x + plot.w, plot.y + plot.h + 30, label, {'text-anchor': 'end'});
}

// A time chart's axes: byte gridlines and labels from y0 to y1, and the
// time since tMin along the bottom.
function timeAxes(layer, plot, sx, sy, [x0, x1], [y0, y1], tMin) {
  const yt = unitTicks(y0, y1, 6, BYTE_UNITS);
  const grid = svg('g', {class: 'grid'}, layer);
  const axis = svg('g', {class: 'axis'}, layer);
  for (const v of yt.ticks) {
    svg('line', {x1: plot.x, x2: plot.x + plot.w, y1: sy(v), y2: sy(v)}, grid);
    svgText(axis, plot.x - 6, sy(v) + 4, tickLabel(v, yt.unit), {'text-anchor': 'end'});
  }
  svg('line', {x1: plot.x, x2: plot.x, y1: plot.y, y2: plot.y + plot.h}, axis);
  const xt = unitTicks(x0 - tMin, x1 - tMin, Math.max(3, Math.floor(plot.w / 110)), TIME_UNITS);
  axisBottom(
      layer, plot, xt.ticks.map(v => ({x: sx(v + tMin), text: tickLabel(v, xt.unit)})),
      'time since the trace\'s first event');
}

// Ticks from `from` to 100% at the smallest whole step (1%, 2%, 5%, 10% or
// 25%) that makes at most about five of them.
function percentTicks(from) {
  const step = [0.01, 0.02, 0.05, 0.1, 0.25].find(s => (1 - from) / s <= 5) || 0.25;
  const ticks = [];
  for (let k = Math.ceil(from / step - 1e-9); k * step <= 1 + 1e-9; k++) ticks.push(k * step);
  return ticks;
}

// ---- policies compared: one panel per trace, rows in the same order ----

function comparePanels(container, data, kind) {
  container.textContent = '';
  const grid = tag('div', 'compare-grid', null, container);
  let marks = 0;
  let top = 0;
  for (const trace of data.traces) {
    for (const r of trace.runs) top = Math.max(top, r.vmm, r.syncs);
  }
  const logTop = Math.log10(1 + Math.max(top, 1));
  // Every panel is placed before any is measured: the grid decides widths.
  const panels = data.traces.map(() => tag('div', null, null, grid));
  data.traces.forEach((trace, t) => {
    const panel = panels[t];
    const width = Math.max(320, panel.clientWidth || 400);
    const rowH = kind === 'calls' ? 26 : 20;
    const label = 112;
    const valueW = kind === 'calls' ? 150 : 70;
    const plot = {x: label, y: 24, w: width - label - valueW, h: rowH * trace.runs.length};
    const root = svg('svg', {width: width, height: plot.y + plot.h + 40, role: 'img'}, panel);
    svgText(root, 0, 14, trace.name, {class: 'title'});
    // Utilization bars start where this trace's runs differ, not at 0%, so
    // that 99.0% and 99.7% look different: the axis starts one step below
    // the lowest run, rounded down to a whole step (1%, or 5% when the lowest
    // run is more than 20% under 100%), and its label says where.
    const lowest = Math.min(...trace.runs.map(r => r.util));
    const step = 1 - lowest > 0.2 ? 0.05 : 0.01;
    const from = kind === 'calls' ? 0 : Math.max(0, Math.floor(lowest / step - 1e-9) * step - step);
    const sx = kind === 'calls' ? v => plot.x + plot.w * Math.log10(1 + v) / logTop :
                                  v => plot.x + plot.w * (v - from) / (1 - from);
    const gridG = svg('g', {class: 'grid'}, root);
    const ticks = kind === 'calls' ?
        [0, 1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7].filter(v => v <= Math.max(top, 1) * 1.0001) :
        percentTicks(from);
    for (const v of ticks) svg('line', {x1: sx(v), x2: sx(v), y1: plot.y, y2: plot.y + plot.h}, gridG);
    trace.runs.forEach((r, i) => {
      const y = plot.y + i * rowH;
      const best = i === trace.best;
      const row = svg('g', {}, root);
      if (best) svg('rect', {class: 'best-row', x: 0, y: y, width: width, height: rowH}, row);
      const name = (best ? '★ ' : '') + data.policies[r.policy];
      svgText(row, label - 6, y + rowH / 2 + 4, name, {'text-anchor': 'end', class: best ? 'best-label' : 'label'});
      let text;
      let tip;
      if (kind === 'calls') {
        svg('rect', {x: plot.x, y: y + 4, width: Math.max(0, sx(r.vmm) - plot.x), height: 9, fill: colour(r.policy)},
            row);
        svg('rect', {x: plot.x, y: y + 15, width: Math.max(0, sx(r.syncs) - plot.x), height: 6, fill: '#555'}, row);
        text = formatCount(r.vmm) + ' vmm · ' + formatCount(r.syncs) + ' syncs';
        tip = data.policies[r.policy] + ' on ' + trace.name + ', last step: ' + formatCount(r.vmm) + ' VMM calls, ' +
            formatCount(r.syncs) + ' syncs, ' + formatCount(r.evcalls) + ' event calls';
      } else {
        svg('rect',
            {x: plot.x, y: y + 3, width: Math.max(0, sx(r.util) - plot.x), height: rowH - 6, fill: colour(r.policy)},
            row);
        text = (100 * r.util).toFixed(1) + '%' + (r.failed ? ' ⚠' + formatCount(r.failed) : '');
        tip = data.policies[r.policy] + ' on ' + trace.name + ': utilization ' + (100 * r.util).toFixed(2) +
            '% (peak live ' + formatBytes(r.peak_live) + ' / peak reserved ' + formatBytes(r.peak_reserved) + ')' +
            (r.failed ? ', ' + formatCount(r.failed) + ' failed allocations' : '');
      }
      svgText(row, plot.x + plot.w + 6, y + rowH / 2 + 4, text, {class: best ? 'value best-label' : 'value'});
      svg('title', {}, row).textContent = tip;
      svg('rect', {x: 0, y: y, width: width, height: rowH, fill: 'transparent'}, row);
      marks++;
    });
    // Log ticks closer than 30 px keep their line but lose their label.
    let lastLabelled = -Infinity;
    const labelled = ticks.filter(v => {
      if (sx(v) - lastLabelled < 30) return false;
      lastLabelled = sx(v);
      return true;
    });
    const percent = v => Math.round(100 * v) + '%';
    axisBottom(root, plot, labelled.map(v => ({x: sx(v), text: kind === 'calls' ? shortCount(v) : percent(v)})),
               kind === 'calls' ? 'driver calls in the last step (log scale)' :
                                  'utilization: peak live / peak reserved' +
                       (from > 0 ? ' (axis from ' + percent(from) + ')' : ''));
  });
  container.dataset.drawn = String(marks);
}

// ---- per trace: live and reserved over time, every policy on one scale ----

function timelineChart(container, data, trace) {
  container.textContent = '';
  const order = rank(trace);
  const series = order.map(i => {
    const r = trace.runs[i];
    return {
      index: i,
      run: r,
      name: data.policies[r.policy],
      colour: colour(r.policy),
      t: r.t || trace.t,
      reserved: r.reserved,
      live: r.live || null,
      on: true,
      best: i === trace.best
    };
  });
  const sharedLive = trace.live ? {t: trace.t, values: trace.live, on: true} : null;
  let tMin = Infinity;
  let tMax = -Infinity;
  for (const s of series) {
    if (s.t.length) {
      tMin = Math.min(tMin, s.t[0]);
      tMax = Math.max(tMax, s.t[s.t.length - 1]);
    }
  }
  if (!(tMax >= tMin)) {
    tag('p', 'note', 'no samples', container);
    container.dataset.drawn = '0';
    return;
  }
  if (tMax === tMin) tMax = tMin + 1;
  let budget = 0;
  for (const s of series) budget = Math.max(budget, s.run.budget || 0);

  const legend = tag('div', 'legend', null, container);
  if (sharedLive) {
    const item = tag('span', 'item', null, legend);
    tag('span', 'swatch live', null, item);
    item.appendChild(document.createTextNode('live (requested) bytes'));
    item.addEventListener('click', () => {
      sharedLive.on = !sharedLive.on;
      item.classList.toggle('off', !sharedLive.on);
      draw();
    });
  }
  for (const s of series) {
    const item = tag('span', 'item' + (s.best ? ' best' : ''), null, legend);
    const swatch = tag('span', 'swatch line', null, item);
    swatch.style.background = s.colour;
    item.appendChild(document.createTextNode((s.best ? '★ ' : '') + s.name + ' ' + formatMiB(s.run.peak_reserved)));
    item.title = 'peak reserved ' + formatMiB(s.run.peak_reserved) + ', utilization ' + (100 * s.run.util).toFixed(2) +
        '% (click to hide or show)';
    item.addEventListener('click', () => {
      s.on = !s.on;
      item.classList.toggle('off', !s.on);
      draw();
    });
  }
  if (budget) {
    const item = tag('span', 'item static', null, legend);
    const swatch = tag('span', 'swatch line', null, item);
    swatch.style.background = 'var(--oom)';
    item.appendChild(document.createTextNode('device budget ' + formatBytes(budget)));
  }
  if (trace.steps && trace.steps.length) {
    const item = tag('span', 'item static', null, legend);
    tag('span', 'swatch step', null, item);
    item.appendChild(document.createTextNode('step boundaries (' + (trace.steps.length + 1) + ' steps)'));
  }
  if (series.some(s => s.run.ooms && s.run.ooms.length)) {
    const item = tag('span', 'item static', null, legend);
    tag('span', 'swatch oom', null, item);
    item.appendChild(document.createTextNode('failed allocation (▲ on the time axis)'));
  }
  const reset = toolbar(
      container,
      'Lines: reserved bytes, one per policy, best first. Drag to zoom (drag a box ' +
          'to zoom both axes), double-click or the button to reset; hover for values.');
  const width = Math.max(480, container.clientWidth || 900);
  const plot = {x: 70, y: 10, w: width - 70 - 18, h: 300};
  const root = svg('svg', {width: width, height: plot.y + plot.h + 44, role: 'img'}, container);
  const clipId = container.id + '-clip';
  svg('rect', {x: plot.x, y: plot.y, width: plot.w, height: plot.h},
      svg('clipPath', {id: clipId}, svg('defs', {}, root)));
  const layer = svg('g', {}, root);
  const front = svg('g', {}, root);
  const hair =
      svg('line', {class: 'hairline', x1: 0, x2: 0, y1: plot.y, y2: plot.y + plot.h, visibility: 'hidden'}, front);
  const overlay = svg(
      'rect', {x: plot.x, y: plot.y, width: plot.w, height: plot.h, fill: 'transparent', cursor: 'crosshair'}, front);
  const tooltip = makeTooltip(container);
  let view = null;
  // The domain drawn last, which the mouse handlers read.
  let x0 = tMin;
  let x1 = tMax;
  let y0 = 0;
  let y1 = 1;

  function visibleMax(x0, x1) {
    let top = 0;
    const scan = (t, values) => {
      const a = indexAt(t, x0);
      const b = indexAt(t, x1);
      for (let i = a; i <= Math.min(b + 1, values.length - 1); i++) top = Math.max(top, values[i]);
    };
    for (const s of series) {
      if (!s.on) continue;
      scan(s.t, s.reserved);
      if (s.live) scan(s.t, s.live);
    }
    if (sharedLive && sharedLive.on) scan(sharedLive.t, sharedLive.values);
    return Math.max(top, budget, 1);
  }

  function draw() {
    layer.textContent = '';
    x0 = view ? view.x0 : tMin;
    x1 = view ? view.x1 : tMax;
    y0 = view && view.y1 !== undefined ? view.y0 : 0;
    y1 = view && view.y1 !== undefined ? view.y1 : visibleMax(x0, x1) * 1.06;
    const sx = t => plot.x + plot.w * (t - x0) / (x1 - x0);
    const sy = v => plot.y + plot.h - plot.h * (v - y0) / (y1 - y0);
    timeAxes(layer, plot, sx, sy, [x0, x1], [y0, y1], tMin);
    const body = svg('g', {'clip-path': 'url(#' + clipId + ')'}, layer);
    let drawn = 0;
    const points = (t, values) => {
      const a = Math.max(0, indexAt(t, x0));
      const b = Math.min(values.length - 1, indexAt(t, x1) + 1);
      const out = [];
      for (let i = a; i <= b; i++) out.push(sx(t[i]).toFixed(1) + ',' + sy(values[i]).toFixed(1));
      return out;
    };
    if (sharedLive && sharedLive.on) {
      const p = points(sharedLive.t, sharedLive.values);
      if (p.length) {
        const base = sy(Math.max(y0, 0)).toFixed(1);
        const first = p[0].split(',')[0];
        const last = p[p.length - 1].split(',')[0];
        svg('polygon', {class: 'live-area', points: first + ',' + base + ' ' + p.join(' ') + ' ' + last + ',' + base},
            body);
        drawn++;
      }
    }
    if (budget) {
      svg('line', {class: 'budget', x1: plot.x, x2: plot.x + plot.w, y1: sy(budget), y2: sy(budget)}, body);
    }
    // Step boundaries: where each step the replay detected begins (step 0
    // holds the setup before the first repeat, as in the driver-calls table).
    // Past about one label per 60 pixels only every n-th is labelled.
    const starts = trace.steps || [];
    const shown = starts.filter(t => t >= x0 && t <= x1).length;
    const every = Math.max(1, Math.ceil(shown / Math.max(1, plot.w / 60)));
    starts.forEach((t, k) => {
      if (t < x0 || t > x1) return;
      const x = sx(t);
      svg('line', {class: 'step', x1: x, x2: x, y1: plot.y, y2: plot.y + plot.h}, body);
      if ((k + 1) % every === 0 || every === 1) {
        svgText(body, x + 3, plot.y + 11, 'step ' + (k + 1), {class: 'step-label'});
      }
    });
    // Worst first, so the best policy's line is drawn on top.
    for (let k = series.length - 1; k >= 0; k--) {
      const s = series[k];
      if (!s.on) continue;
      if (s.live) {
        svg('polyline', {
          points: points(s.t, s.live).join(' '),
          fill: 'none',
          stroke: s.colour,
          'stroke-width': 1,
          'stroke-dasharray': '3 2'
        },
            body);
      }
      svg('polyline', {
        points: points(s.t, s.reserved).join(' '),
        fill: 'none',
        stroke: s.colour,
        'stroke-width': s.best ? 2.6 : 1.5
      },
          body);
      drawn++;
      for (const t of (s.run.ooms || [])) {
        if (t < x0 || t > x1) continue;
        const x = sx(t);
        svg('path', {class: 'oom', d: 'M' + x.toFixed(1) + ',' + (plot.y + plot.h) + 'l-4,-8h8z', stroke: s.colour},
            body);
      }
    }
    reset.hidden = !view;
    container.dataset.zoomed = view ? '1' : '0';
    container.dataset.x0 = String(x0);
    container.dataset.x1 = String(x1);
    container.dataset.drawn = String(drawn);
  }
  overlay.addEventListener('mousemove', ev => {
    const box = overlay.getBoundingClientRect();
    const px = ev.clientX - box.left;
    const t = x0 + (x1 - x0) * px / plot.w;
    hair.setAttribute('x1', plot.x + px);
    hair.setAttribute('x2', plot.x + px);
    hair.setAttribute('visibility', 'visible');
    const rows = [{label: formatTime(t - tMin) + ' since the first event'}];
    if (sharedLive) {
      rows.push({label: 'live', value: formatMiB(sharedLive.values[indexAt(sharedLive.t, t)]), swatch: 'live'});
    }
    const values = series.filter(s => s.on).map(s => ({s: s, v: s.reserved[indexAt(s.t, t)]}));
    values.sort((a, b) => b.v - a.v);
    for (const {s, v} of values) {
      const live = s.live ? ' (live ' + formatMiB(s.live[indexAt(s.t, t)]) + ')' : '';
      rows.push({label: (s.best ? '★ ' : '') + s.name + live, value: formatMiB(v), colour: s.colour});
    }
    const host = container.getBoundingClientRect();
    tooltip.show(rows, ev.clientX - host.left, ev.clientY - host.top);
  });
  overlay.addEventListener('mouseleave', () => {
    hair.setAttribute('visibility', 'hidden');
    tooltip.hide();
  });
  dragZoom(
      overlay, plot, front,
      (a, b, c, d, rectangle) => {
        const t = px => x0 + (x1 - x0) * px / plot.w;
        const v = py => y1 - (y1 - y0) * py / plot.h;
        view = rectangle ? {x0: t(a), x1: t(b), y0: v(d), y1: v(c)} : {x0: t(a), x1: t(b)};
        draw();
      },
      () => {
        view = null;
        draw();
      },
      true);
  reset.addEventListener('click', () => {
    view = null;
    draw();
  });
  draw();
}

// ---- per trace: every allocation over time, stacked (memory_viz's view) ----

// Each band is one allocation, stacked in allocation order, so a band drops
// when one below it is freed; the grey area at the bottom sums the
// allocations too small or short-lived to draw. Coloured by owner when the
// trace names owners (its Owner column), else band by band.
function bandsChart(container, data, trace) {
  container.textContent = '';
  const view = trace.allocations;
  if (!view || !view.times.length) {
    tag('p', 'note', 'no allocations', container);
    container.dataset.drawn = '0';
    return;
  }
  const times = view.times;
  const bands = view.bands.map(b => ({begin: b[0], end: b[1], size: b[2], owner: b[3], line: b[4], freed: b[5]}));
  const named = view.owners.some(o => o.name);
  const ownerColour = o => PALETTE[o % PALETTE.length];
  const bandColour = (b, i) => named ? ownerColour(b.owner) : PALETTE[i % PALETTE.length];
  // Each band's [bottom, top) at every sample it is live at; rest below all.
  const live = (b, t) => b.begin <= t && (t < b.end || !b.freed);
  const bottoms = bands.map(() => new Float64Array(times.length).fill(-1));
  const totals = new Float64Array(times.length);
  for (let k = 0; k < times.length; k++) {
    let level = view.rest[k];
    for (let i = 0; i < bands.length; i++) {
      if (!live(bands[i], times[k])) continue;
      bottoms[i][k] = level;
      level += bands[i].size;
    }
    totals[k] = level;
  }
  const tMin = times[0];
  const tMax = times[times.length - 1] > tMin ? times[times.length - 1] : tMin + 1;

  const legend = tag('div', 'legend', null, container);
  if (named) {
    view.owners.forEach((o, i) => {
      if (!o.allocations) return;
      const item = tag('span', 'item static', null, legend);
      const swatch = tag('span', 'swatch', null, item);
      swatch.style.background = ownerColour(i);
      item.appendChild(document.createTextNode((o.name || 'not named') + (o.name ? ' (' + o.kind + ')' : '')));
    });
  } else {
    const item = tag('span', 'item static', null, legend);
    item.appendChild(document.createTextNode('one colour per allocation (the trace names no owners)'));
  }
  const restItem = tag('span', 'item static', null, legend);
  tag('span', 'swatch rest', null, restItem);
  restItem.appendChild(document.createTextNode(
      formatCount(view.left_out) + ' smaller or shorter allocations, summed (' + formatCount(bands.length) +
      ' of ' + formatCount(view.count) + ' drawn)'));
  const reset = toolbar(container, 'Bands: one allocation each, stacked in allocation order. Drag to zoom, ' +
      'double-click or the button to reset; hover for the allocation.');
  const width = Math.max(480, container.clientWidth || 900);
  const plot = {x: 70, y: 10, w: width - 70 - 18, h: 300};
  const root = svg('svg', {width: width, height: plot.y + plot.h + 44, role: 'img'}, container);
  const clipId = container.id + '-clip';
  svg('rect', {x: plot.x, y: plot.y, width: plot.w, height: plot.h},
      svg('clipPath', {id: clipId}, svg('defs', {}, root)));
  const layer = svg('g', {}, root);
  const front = svg('g', {}, root);
  const overlay = svg(
      'rect', {x: plot.x, y: plot.y, width: plot.w, height: plot.h, fill: 'transparent', cursor: 'crosshair'}, front);
  const tooltip = makeTooltip(container);
  let zoom = null;
  let x0 = tMin;
  let x1 = tMax;
  let y1 = 1;

  function draw() {
    layer.textContent = '';
    x0 = zoom ? zoom.x0 : tMin;
    x1 = zoom ? zoom.x1 : tMax;
    const a = Math.max(0, indexAt(times, x0));
    const b = Math.min(times.length - 1, indexAt(times, x1));
    let top = 1;
    for (let k = a; k <= b; k++) top = Math.max(top, totals[k]);
    y1 = top * 1.06;
    const sx = t => plot.x + plot.w * (t - x0) / (x1 - x0);
    const sy = v => plot.y + plot.h - plot.h * v / y1;
    timeAxes(layer, plot, sx, sy, [x0, x1], [0, y1], tMin);
    const body = svg('g', {'clip-path': 'url(#' + clipId + ')'}, layer);
    let drawn = 0;
    // A polygon over the samples [from, to], each holding until the next (a
    // step): its top edge, then its bottom back.
    const area = (from, to, lower, upper, attrs) => {
      const up = [];
      const down = [];
      for (let k = from; k <= to; k++) {
        const left = sx(Math.max(times[k], x0)).toFixed(1);
        const right = sx(k + 1 < times.length ? Math.min(times[k + 1], x1) : x1).toFixed(1);
        const top = sy(upper(k)).toFixed(1);
        const bottom = sy(lower(k)).toFixed(1);
        up.push(left + ',' + top, right + ',' + top);
        down.push(left + ',' + bottom, right + ',' + bottom);
      }
      svg('polygon', Object.assign({points: up.concat(down.reverse()).join(' ')}, attrs), body);
      drawn++;
    };
    area(a, b, () => 0, k => view.rest[k], {class: 'rest-area'});
    bands.forEach((band, i) => {
      // Its runs of consecutive live samples within the view.
      let k = a;
      while (k <= b) {
        while (k <= b && bottoms[i][k] < 0) k++;
        if (k > b) break;
        let end = k;
        while (end + 1 <= b && bottoms[i][end + 1] >= 0) end++;
        area(k, end, j => bottoms[i][j], j => bottoms[i][j] + band.size,
             {fill: bandColour(band, i), class: 'band', 'data-band': i});
        k = end + 1;
      }
    });
    for (const t of (trace.steps || [])) {
      if (t < x0 || t > x1) continue;
      svg('line', {class: 'step', x1: sx(t), x2: sx(t), y1: plot.y, y2: plot.y + plot.h}, body);
    }
    reset.hidden = !zoom;
    container.dataset.zoomed = zoom ? '1' : '0';
    container.dataset.drawn = String(drawn);
  }
  overlay.addEventListener('mousemove', ev => {
    const box = overlay.getBoundingClientRect();
    const t = x0 + (x1 - x0) * (ev.clientX - box.left) / plot.w;
    const v = y1 * (1 - (ev.clientY - box.top) / plot.h);
    const k = indexAt(times, t);
    const rows = [{label: formatTime(times[k] - tMin) + ' since the first event'}];
    const hit = bands.findIndex((band, i) => bottoms[i][k] >= 0 && v >= bottoms[i][k] && v < bottoms[i][k] + band.size);
    if (hit >= 0) {
      const band = bands[hit];
      const owner = view.owners[band.owner] || {};
      rows.push({label: 'allocation (trace line ' + formatCount(band.line) + ')', value: formatMiB(band.size),
                 colour: bandColour(band, hit)});
      rows.push({label: 'owner', value: owner.name ? owner.name + ' (' + owner.kind + ')' : 'not named'});
      rows.push({label: 'allocated at', value: formatTime(band.begin - tMin)});
      rows.push({label: band.freed ? 'freed at' : 'never freed', value: band.freed ? formatTime(band.end - tMin) : ''});
    } else if (v >= 0 && v < view.rest[k]) {
      rows.push({label: 'smaller or shorter allocations', value: formatMiB(view.rest[k]), swatch: 'rest'});
    }
    rows.push({label: 'live at this sample', value: formatMiB(totals[k])});
    const host = container.getBoundingClientRect();
    tooltip.show(rows, ev.clientX - host.left, ev.clientY - host.top);
  });
  overlay.addEventListener('mouseleave', () => tooltip.hide());
  zoomAlongX(overlay, plot, front, reset, () => [x0, x1], z => {
    zoom = z;
    draw();
  });
  draw();
}

// ---- per trace: the pool at the live peak, one strip per policy ----

// The pool's layout per policy as strips: at the live peak (block by block),
// or, with the slider, at one of the moments the replay captured (neighbouring
// blocks of one kind merged there).
function poolChart(container, data, trace) {
  container.textContent = '';
  const runs = rank(trace).map(i => trace.runs[i]).filter(r => r.layout && r.layout.length);
  // 0: the live peak; k > 0: the k-th moment.
  const momentCount = runs.reduce((n, r) => Math.max(n, (r.moments || []).length), 0);
  let moment = 0;
  function layoutOf(r) {
    if (moment === 0) return r.layout;
    const m = (r.moments || [])[moment - 1];
    return m ? m.layout : [];
  }
  function buildRow(r) {
    const layout = layoutOf(r);
    const starts = new Float64Array(layout.length + 1);
    let free = 0;
    let freeBlocks = 0;
    let largest = 0;
    layout.forEach((v, k) => {
      starts[k + 1] = starts[k] + Math.abs(v);
      if (v < 0) {
        free -= v;
        freeBlocks++;
        largest = Math.max(largest, -v);
      }
    });
    return {
      run: r,
      layout: layout,
      merged: moment > 0,
      name: data.policies[r.policy],
      best: trace.runs.indexOf(r) === trace.best,
      starts: starts,
      total: starts[layout.length],
      free: free,
      freeBlocks: freeBlocks,
      largest: largest
    };
  }
  let rows = runs.map(buildRow);
  if (!rows.length) {
    tag('p', 'note', 'no layout captured', container);
    container.dataset.drawn = '0';
    return;
  }
  if (momentCount > 0) {
    const bar = tag('div', 'moment-bar', null, container);
    const label = tag('label', 'moment-label', 'Pool at: ', bar);
    const slider = tag('input', 'moment-slider', null, label);
    slider.type = 'range';
    slider.min = '0';
    slider.max = String(momentCount);
    slider.value = '0';
    slider.setAttribute('aria-label', 'moment of the trace');
    const text = tag('span', 'moment-text', null, bar);
    const describe = () => {
      if (moment === 0) {
        text.textContent = 'the live peak, block by block';
        return;
      }
      const m = runs.map(r => (r.moments || [])[moment - 1]).find(x => x);
      text.textContent = m ? formatTime(m.t - trace.t[0]) + ' into the trace (' + moment + ' of ' + momentCount +
              '): live ' + formatMiB(m.live) + '; blocks of one kind merged' :
                             'no layout at this moment';
    };
    slider.addEventListener('input', () => {
      moment = Number(slider.value);
      rows = runs.map(buildRow);
      view = null;
      container.dataset.moment = String(moment);
      describe();
      totalMax = rows.reduce((t, row) => Math.max(t, row.total), 0) || 1;
      draw();
    });
    describe();
  }
  container.dataset.moment = '0';
  const legend = tag('div', 'legend', null, container);
  for (const [cls, text] of [['used', 'used: a live block'], ['free', 'free: held by the pool, not handed out']]) {
    const item = tag('span', 'item static', null, legend);
    tag('span', 'swatch ' + cls, null, item);
    item.appendChild(document.createTextNode(text));
  }
  const reset = toolbar(
      container,
      'Blocks in address order, held memory only (unbacked address space left out), ' +
          'all policies on one byte scale. Where one pixel holds several blocks the ' +
          'used share is drawn as its height. Drag to zoom, hover for blocks.');
  let totalMax = 0;
  for (const row of rows) totalMax = Math.max(totalMax, row.total);
  totalMax = totalMax || 1;
  const width = Math.max(480, container.clientWidth || 900);
  const stripH = 22;
  const gap = 9;
  const plot = {x: 130, y: 6, w: width - 130 - 230, h: rows.length * (stripH + gap) - gap};
  const root = svg('svg', {width: width, height: plot.y + plot.h + 44, role: 'img'}, container);
  const layer = svg('g', {}, root);
  const overlay = svg(
      'rect', {x: plot.x, y: plot.y, width: plot.w, height: plot.h, fill: 'transparent', cursor: 'crosshair'}, root);
  const tooltip = makeTooltip(container);
  let view = null;
  let x0 = 0;
  let x1 = totalMax;

  function draw() {
    layer.textContent = '';
    x0 = view ? view.x0 : 0;
    x1 = view ? view.x1 : totalMax;
    const sx = b => plot.x + plot.w * (b - x0) / (x1 - x0);
    const xt = unitTicks(x0, x1, Math.max(3, Math.floor(plot.w / 110)), BYTE_UNITS);
    const grid = svg('g', {class: 'grid'}, layer);
    for (const v of xt.ticks) svg('line', {x1: sx(v), x2: sx(v), y1: plot.y, y2: plot.y + plot.h}, grid);
    axisBottom(
        layer, plot, xt.ticks.map(v => ({x: sx(v), text: tickLabel(v, xt.unit)})),
        'bytes held, from the start of the pool');
    let drawn = 0;
    rows.forEach((row, k) => {
      const y = plot.y + k * (stripH + gap);
      svgText(
          layer, plot.x - 8, y + stripH / 2 + 4, (row.best ? '★ ' : '') + row.name,
          {'text-anchor': 'end', class: row.best ? 'best-label' : 'label'});
      // At a moment, neighbouring blocks of one kind are merged: their count
      // would not be the pool's, so none is given.
      svgText(
          layer, plot.x + plot.w + 8, y + stripH / 2 + 4,
          formatMiB(row.total) + ' held, ' + formatMiB(row.free) + ' free' +
              (row.merged ? '' : ' in ' + formatCount(row.freeBlocks) + (row.freeBlocks === 1 ? ' block' : ' blocks')),
          {class: 'value'});
      svg('rect', {x: plot.x, y: y, width: plot.w, height: stripH, fill: '#f4f5f7'}, layer);
      const strip = svg('g', {}, layer);
      // Blocks of two pixels or more are drawn as they are; narrower ones
      // are summed per pixel column, used at the bottom.
      const cols = Math.ceil(plot.w) + 1;
      const usedPx = new Float64Array(cols);
      const freePx = new Float64Array(cols);
      const layout = row.layout;
      for (let i = 0; i < layout.length; i++) {
        const b0 = row.starts[i];
        const b1 = row.starts[i + 1];
        if (b1 <= x0 || b0 >= x1) continue;
        const p0 = sx(Math.max(b0, x0));
        const p1 = sx(Math.min(b1, x1));
        const cls = layout[i] > 0 ? 'used' : 'free';
        if (p1 - p0 >= 2) {
          svg('rect', {
            class: cls,
            x: p0.toFixed(2),
            y: y,
            width: Math.max(1, p1 - p0 - (p1 - p0 >= 4 ? 1 : 0)).toFixed(2),
            height: stripH
          },
              strip);
          drawn++;
        } else {
          const c = Math.min(cols - 1, Math.max(0, Math.floor((p0 + p1) / 2 - plot.x)));
          (layout[i] > 0 ? usedPx : freePx)[c] += Math.min(b1, x1) - Math.max(b0, x0);
        }
      }
      for (let c = 0; c < cols; c++) {
        const sum = usedPx[c] + freePx[c];
        if (!sum) continue;
        const h = stripH * usedPx[c] / sum;
        if (h > 0) svg('rect', {class: 'used', x: plot.x + c, y: y + stripH - h, width: 1, height: h}, strip);
        if (h < stripH) svg('rect', {class: 'free', x: plot.x + c, y: y, width: 1, height: stripH - h}, strip);
        drawn++;
      }
    });
    reset.hidden = !view;
    container.dataset.zoomed = view ? '1' : '0';
    container.dataset.drawn = String(drawn);
  }
  overlay.addEventListener('mousemove', ev => {
    const box = overlay.getBoundingClientRect();
    const px = ev.clientX - box.left;
    const py = ev.clientY - box.top;
    const k = Math.floor(py / (stripH + gap));
    const host = container.getBoundingClientRect();
    if (k < 0 || k >= rows.length || py - k * (stripH + gap) > stripH) {
      tooltip.hide();
      return;
    }
    const row = rows[k];
    const perPx = (x1 - x0) / plot.w;
    const a = x0 + px * perPx;
    const out = [{label: (row.best ? '★ ' : '') + row.name + ', at ' + formatBytes(a)}];
    // Every block under this pixel.
    let i = indexAt(row.starts, a);
    let used = 0;
    let free = 0;
    let n = 0;
    let one = -1;
    for (; i < row.layout.length && row.starts[i] < a + perPx; i++) {
      if (row.starts[i + 1] <= a) continue;
      const v = row.layout[i];
      if (v > 0)
        used += v;
      else
        free -= v;
      n++;
      one = i;
    }
    if (n === 1) {
      const v = row.layout[one];
      out.push({
        label: (v > 0 ? 'used' : 'free') + (row.merged ? ' (neighbouring blocks merged)' : ' block'),
        value: formatBytes(Math.abs(v)),
        swatch: v > 0 ? 'used' : 'free'
      });
      out.push({label: 'from', value: formatBytes(row.starts[one])});
    } else if (n > 1) {
      out.push({label: formatCount(n) + (row.merged ? ' runs of blocks' : ' blocks') + ' in this pixel'});
      out.push({label: 'used', value: formatBytes(used), swatch: 'used'});
      out.push({label: 'free', value: formatBytes(free), swatch: 'free'});
    } else {
      out.push({label: 'past the end of this pool'});
    }
    tooltip.show(out, ev.clientX - host.left, ev.clientY - host.top);
  });
  overlay.addEventListener('mouseleave', () => tooltip.hide());
  zoomAlongX(overlay, plot, root, reset, () => [x0, x1], z => {
    view = z;
    draw();
  });
  draw();
}

function render(data) {
  for (const node of document.querySelectorAll('[data-chart]')) {
    try {
      const kind = node.dataset.chart;
      if (kind === 'utilization' || kind === 'calls') {
        comparePanels(node, data, kind);
      } else {
        const trace = data.traces[Number(node.dataset.trace)];
        if (kind === 'timeline') timelineChart(node, data, trace);
        if (kind === 'pool') poolChart(node, data, trace);
        if (kind === 'bands') bandsChart(node, data, trace);
      }
    } catch (err) {
      node.dataset.error = String(err);
      console.error('tidepool report: chart ' + node.id + ' failed: ' + err);
    }
  }
}

const source = document.getElementById('report-data');
const data = source ? JSON.parse(source.textContent) : {policies: [], traces: []};
window.tidepoolReport = {
  data,
  niceTicks,
  formatBytes,
  formatTime,
  unitTicks,
  rank,
  indexAt
};
render(data);
let pending = 0;
window.addEventListener('resize', () => {
  clearTimeout(pending);
  pending = setTimeout(() => render(data), 150);
});
})();
