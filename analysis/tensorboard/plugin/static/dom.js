// The tab's small parts: JSON from the plugin's routes, number formats and DOM builders. Every
// view module imports them from here, so no view imports another view's module back.

const SVG_NS = 'http://www.w3.org/2000/svg';

export async function getJson(route) {
  const response = await fetch(route);
  const doc = await response.json();
  if (!response.ok) throw new Error(doc.error || `${route}: HTTP ${response.status}`);
  return doc;
}

export function ms(value) {
  return value == null ? 'n/a' : value.toFixed(3);
}

export function signed(value, digits) {
  return value == null ? 'n/a' : (value > 0 ? '+' : '') + value.toFixed(digits);
}

export function halfWidth(value, interval) {
  if (interval == null) return '';
  return `±${Math.max(value - interval[0], interval[1] - value).toFixed(3)}`;
}

export function withInterval(value, interval) {
  const half = halfWidth(value, interval);
  return half ? `${ms(value)} ${half}` : ms(value);
}

export function originMark(origin) {
  return {'inferred': ' (inferred)', 'not identified': ' (not identified: in other)',
          'not applicable': ' (not applicable)', 'annotated': ' (annotated)'}[origin] || '';
}

export function notes(lines) {
  return html('ul', {class: 'notes'}, ...lines.map((line) => html('li', {}, line)));
}

export function legend(items) {
  return html('div', {class: 'legend'},
      ...items.map(([name, colour]) => html('span', {}, swatch(colour), name)));
}

export function swatch(colour) {
  const box = html('span', {class: 'swatch'});
  box.style.background = colour;
  return box;
}

export function section(name, title, ...children) {
  return html('section', {'data-view': name}, html('h2', {}, title), ...children);
}

export function table(head, rows) {
  return html('table', {},
      html('thead', {}, html('tr', {}, ...head.map((cell) => html('th', {}, cell)))),
      html('tbody', {}, ...rows));
}

export function button(text, onClick) {
  const b = html('button', {type: 'button'}, text);
  b.addEventListener('click', onClick);
  return b;
}

export function html(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

export function svgEl(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children.filter((child) => child != null && child !== ''));
  return node;
}
