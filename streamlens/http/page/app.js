// streamlens' live page: plain JavaScript, no framework, no build step, nothing from elsewhere.
//
// Frames and results travel apart: each stream's canvas polls /api/streams/<name>/preview.jpg (the
// newest frame, not drawn on) at most `preview_fps` times a second, and draws the boxes, labels, lines
// and zones itself from the frame message that comes with it (header X-Streamlens-Result, or
// /api/streams/<name>/result?seq=). Turning boxes off redraws the canvas: nothing is encoded again.
// Figures come from /api/stats once a second, events from /api/events?since=N, the streams and their
// geometry from /api/streams. A hidden tab, and the streams hidden by the large view, fetch no frames.
//
// For tests and scripts, window.streamlens holds: drawn[stream] = {seq, boxes: [[x1, y1, x2, y2], ...],
// colors, rules}, what its canvas shows (boxes in source pixels; rules: how many lines and zones);
// frames[stream] and framesDrawn, the frames drawn; view, the large view's stream (or null);
// statsUpdates and plotPoints; ready, once the streams are known; setPaused(paused, show = true),
// which holds every canvas as it is (show: false leaves the pause button as it was); open(name), close();
// similar(stream, id, ts), what an event's "similar" button does, and similarShown, the tracks it
// showed ([{stream, id, score}], best first; null before).
"use strict";

(() => {
  // supervision's default palette (the annotated video's colours): a track keeps its colour
  const PALETTE = ["#a351fb", "#ff4040", "#ffa1a0", "#ff7633", "#ffb633", "#d1d435", "#4cfb12", "#94cf1a",
    "#40de8a", "#1b9640", "#00d6c1", "#2e9caa", "#00c4ff", "#364797", "#6675ff", "#0019ef", "#863aff",
    "#530087", "#cd3aff", "#ff97ca", "#ff39c9"];
  const LINE_COLORS = ["#ffe000", "#ff39c9", "#00e5ff", "#4cfb12", "#ff7633"];
  const ZONE_COLORS = ["#00c4ff", "#ff7633", "#a351fb", "#40de8a", "#ff4040"];
  const STREAM_COLORS = ["#4cc2ff", "#ffb633", "#3ecf7a", "#ff5c5c", "#cd3aff", "#ffe000", "#00d6c1", "#ff97ca"];
  const EVENTS_SHOWN = 60;

  const $ = (selector, root = document) => root.querySelector(selector);
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const viewer = Math.random().toString(36).slice(2, 10);

  const state = {
    streams: new Map(),   // name -> {info, tile, canvas, ctx, bitmap, message, seq, figures}
    order: [],
    view: null,           // the stream in the large view, or null for the grid
    boxes: true,
    rules: true,
    paused: false,
    previewFps: 5,
    budgetMs: 33,
    historyNext: 0,
    history: {t: [], p95: {}},
    eventsSince: 0,
    hasHistory: false,    // runtime.history is set (/api/streams)
    day: null,            // runtime.history: per "stream\u0000rule", the last 24 h {in, out, count, hours}
    streamsStale: true,   // /api/streams to be read again now (a stream's first frame came)
  };

  const api = window.streamlens = {
    drawn: {}, frames: {}, framesDrawn: 0, view: null, statsUpdates: 0, plotPoints: 0, paused: false, day: null,
    ready: false,
    setPaused(paused, show = true) { setPaused(paused, show); },
    open(name) { openLarge(name); },
    close() { closeLarge(); },
    rleCounts(text) { return rleCounts(text); },  // for the tests: COCO RLE as the page reads it
    similar(stream, id, ts) { return showSimilar(stream, id, ts); },
    similarShown: null,
  };

  async function getJson(url) {
    const response = await fetch(url, {cache: "no-store"});
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    return response.json();
  }

  // -- drawing ----------------------------------------------------------------------------------

  function colorOf(obj) {
    const index = obj.id >= 0 ? obj.id : Math.max(0, obj.cls);
    return PALETTE[index % PALETTE.length];
  }

  function textColor(hex) {
    const r = parseInt(hex.slice(1, 3), 16), g = parseInt(hex.slice(3, 5), 16), b = parseInt(hex.slice(5, 7), 16);
    return 0.299 * r + 0.587 * g + 0.114 * b > 150 ? "#000" : "#fff";
  }

  function labelOf(obj) {
    const parts = [];
    if (obj.id >= 0) parts.push(`#${obj.id}`);
    parts.push(obj.label);
    parts.push(Number(obj.score).toFixed(2));
    if (obj.speed_kmh != null) parts.push(`${Math.round(obj.speed_kmh)} km/h`);
    const known = obj.attributes ? Object.values(obj.attributes).filter(Boolean).map((a) => a.label) : [];
    return parts.join(" ") + (known.length ? ` · ${known.join(" ")}` : "");
  }

  function label(ctx, text, x, y, background, size, centre = false) {
    ctx.font = `600 ${size}px system-ui, sans-serif`;
    const pad = size * 0.3, w = ctx.measureText(text).width + 2 * pad, h = size + 2 * pad;
    let left = centre ? x - w / 2 : x, top = centre ? y - h / 2 : y;
    left = Math.max(0, Math.min(left, ctx.canvas.width - w));
    top = Math.max(0, Math.min(top, ctx.canvas.height - h));
    ctx.fillStyle = background;
    ctx.fillRect(left, top, w, h);
    ctx.fillStyle = textColor(background);
    ctx.textBaseline = "top";
    ctx.fillText(text, left + pad, top + pad);
  }

  function drawRules(ctx, info, counts, unit) {
    counts = counts || {};
    const drawn = (info.zones || []).length + (info.lines || []).length;
    (info.zones || []).forEach((zone, k) => {
      const color = ZONE_COLORS[k % ZONE_COLORS.length];
      const points = zone.polygon;
      if (points.length < 3) return;
      ctx.beginPath();
      points.forEach(([x, y], i) => (i ? ctx.lineTo(x, y) : ctx.moveTo(x, y)));
      ctx.closePath();
      ctx.globalAlpha = 0.2;
      ctx.fillStyle = color;
      ctx.fill();
      ctx.globalAlpha = 1;
      ctx.lineWidth = 2 * unit;
      ctx.strokeStyle = color;
      ctx.stroke();
      const cx = points.reduce((s, p) => s + p[0], 0) / points.length;
      const cy = points.reduce((s, p) => s + p[1], 0) / points.length;
      const n = Number.isInteger(counts[zone.name]) ? counts[zone.name] : 0;
      label(ctx, `${zone.name} ${n}`, cx, cy, color, 13 * unit, true);
    });
    (info.lines || []).forEach((line, k) => {
      const color = LINE_COLORS[k % LINE_COLORS.length];
      const [[ax, ay], [bx, by]] = line.points;
      ctx.lineWidth = 2 * unit;
      ctx.strokeStyle = color;
      ctx.beginPath();
      ctx.moveTo(ax, ay);
      ctx.lineTo(bx, by);
      // an arrow from the middle into the `in` side (the left, seen from the first point to the second)
      const length = Math.max(1e-9, Math.hypot(bx - ax, by - ay));
      const nx = (by - ay) / length, ny = -(bx - ax) / length;
      const mx = (ax + bx) / 2, my = (ay + by) / 2, arrow = 24 * unit;
      const tx = mx + arrow * nx, ty = my + arrow * ny, head = arrow * 0.4;
      ctx.moveTo(mx, my);
      ctx.lineTo(tx, ty);
      ctx.moveTo(tx - head * (nx - ny * 0.6), ty - head * (ny + nx * 0.6));
      ctx.lineTo(tx, ty);
      ctx.lineTo(tx - head * (nx + ny * 0.6), ty - head * (ny - nx * 0.6));
      ctx.stroke();
      const c = counts[line.name] || {};
      label(ctx, `${line.name} in ${c.in || 0} out ${c.out || 0}`, ax, ay, color, 13 * unit);
    });
    return drawn;
  }

  function rleCounts(text) {
    // COCO's compressed RLE counts (pycocotools' rleFrString): 5 bits a character from '0', a sixth
    // saying more follow, the last chunk's top bit the sign; from the third on, a delta on the one two before
    const counts = [];
    let p = 0;
    while (p < text.length) {
      let x = 0, k = 0, more = true;
      while (more) {
        const c = text.charCodeAt(p) - 48;
        x |= (c & 0x1f) << (5 * k);
        more = (c & 0x20) !== 0;
        p += 1;
        k += 1;
        if (!more && (c & 0x10)) x |= -1 << (5 * k);
      }
      if (counts.length > 2) x += counts[counts.length - 2];
      counts.push(x);
    }
    return counts;
  }

  function rleCanvas(rle, color) {
    // an RLE mask (column-major runs over the frame, 0s first) as a canvas of its bounding box in
    // `color`, and where that box lies: {canvas, x, y}; null when it has no pixel
    const [h] = rle.size;
    const counts = typeof rle.counts === "string" ? rleCounts(rle.counts) : rle.counts;
    const runs = [];
    let at = 0, x1 = Infinity, y1 = Infinity, x2 = -1, y2 = -1;
    counts.forEach((n, i) => {
      if (i % 2 === 1 && n > 0) {
        runs.push([at, n]);
        const c1 = Math.floor(at / h), c2 = Math.floor((at + n - 1) / h);
        x1 = Math.min(x1, c1); x2 = Math.max(x2, c2);
        y1 = Math.min(y1, c1 === c2 ? at % h : 0); y2 = Math.max(y2, c1 === c2 ? (at + n - 1) % h : h - 1);
      }
      at += n;
    });
    if (!runs.length) return null;
    const w = x2 - x1 + 1, hh = y2 - y1 + 1;
    const image = new ImageData(w, hh);
    for (const [start, n] of runs) {
      for (let idx = start; idx < start + n; idx += 1) {
        const o = ((idx % h - y1) * w + Math.floor(idx / h) - x1) * 4;
        image.data[o + 3] = 255;
      }
    }
    const canvas = document.createElement("canvas");
    canvas.width = w;
    canvas.height = hh;
    const c = canvas.getContext("2d");
    c.putImageData(image, 0, 0);
    c.globalCompositeOperation = "source-in";  // the mask's pixels take the colour
    c.fillStyle = color;
    c.fillRect(0, 0, w, hh);
    return {canvas, x: x1, y: y1};
  }

  function drawMasks(ctx, objects) {
    // each object's mask, COCO polygons or COCO RLE (`segment.output`), tinted in its box's colour at
    // half opacity under the boxes, as the annotated video draws it
    let drawn = 0;
    ctx.save();
    ctx.globalAlpha = 0.5;
    for (const obj of objects) {
      if (obj.mask && obj.mask.counts !== undefined && Array.isArray(obj.mask.size)) {
        const made = rleCanvas(obj.mask, colorOf(obj));
        if (made) {
          ctx.drawImage(made.canvas, made.x, made.y);
          drawn += 1;
        }
        continue;
      }
      if (!Array.isArray(obj.mask)) continue;
      ctx.fillStyle = colorOf(obj);
      ctx.beginPath();
      for (const part of obj.mask) {
        if (part.length < 6) continue;
        ctx.moveTo(part[0], part[1]);
        for (let k = 2; k + 1 < part.length; k += 2) ctx.lineTo(part[k], part[k + 1]);
        ctx.closePath();
      }
      ctx.fill("evenodd");
      drawn += 1;
    }
    ctx.restore();
    return drawn;
  }

  function drawObjects(ctx, objects, unit) {
    const boxes = [], colors = [];
    const masks = drawMasks(ctx, objects);
    ctx.lineWidth = 2 * unit;
    for (const obj of objects) {
      const [x1, y1, x2, y2] = obj.box;
      const color = colorOf(obj);
      ctx.strokeStyle = color;
      ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
      boxes.push(obj.box);
      colors.push(color);
    }
    for (const obj of objects) {  // labels over every box
      const size = 11 * unit;
      const [x1, y1] = obj.box;
      label(ctx, labelOf(obj), x1 - unit, y1 - 1.6 * size, colorOf(obj), size);
    }
    return {boxes, colors, masks};
  }

  function draw(stream) {
    const {canvas, ctx, bitmap, message, info} = stream;
    if (!bitmap) return;
    const width = (message && message.width) || info.width || bitmap.width;
    const height = (message && message.height) || info.height || bitmap.height;
    if (canvas.width !== width || canvas.height !== height) {
      canvas.width = width;
      canvas.height = height;
    }
    ctx.drawImage(bitmap, 0, 0, width, height);
    // lines and labels keep their size on the screen whatever the stream's: `unit` is 1 CSS pixel
    const onScreen = canvas.getBoundingClientRect();
    const scale = Math.min(onScreen.width / width, onScreen.height / height);
    const unit = scale > 0 ? 1 / scale : Math.max(1, width / 640);
    const rules = state.rules ? drawRules(ctx, info, message && message.counts, unit) : 0;
    let shown = {boxes: [], colors: [], masks: 0};
    if (state.boxes && message) shown = drawObjects(ctx, message.objects || [], unit);
    api.drawn[info.name] = {seq: stream.seq, boxes: shown.boxes, colors: shown.colors, masks: shown.masks, rules};
    stream.tile.classList.add("drawn");
  }

  function redrawAll() {
    for (const stream of state.streams.values()) draw(stream);
  }

  // -- live frames ------------------------------------------------------------------------------

  function wanted(stream) {
    return !state.paused && !document.hidden && (state.view === null || state.view === stream.info.name);
  }

  async function fetchFrame(stream) {
    const name = encodeURIComponent(stream.info.name);
    const after = stream.seq === null ? "" : `&after=${stream.seq}`;
    const response = await fetch(`/api/streams/${name}/preview.jpg?viewer=${viewer}${after}`, {cache: "no-store"});
    if (response.status !== 200) return;  // 204: nothing new
    const seq = Number(response.headers.get("X-Streamlens-Seq"));
    const header = response.headers.get("X-Streamlens-Result");
    const blob = await response.blob();
    let message = header ? JSON.parse(header) : null;
    if (!message) {
      const again = await fetch(`/api/streams/${name}/result?seq=${seq}`, {cache: "no-store"});
      if (again.ok) message = await again.json();
    }
    const bitmap = await createImageBitmap(blob);
    if (state.paused) {  // paused meanwhile: the canvas keeps what it shows
      bitmap.close();
      return;
    }
    if (stream.bitmap) stream.bitmap.close();
    Object.assign(stream, {bitmap, message, seq});
    if (stream.info.seq === null) state.streamsStale = true;  // its size and rules are known now
    draw(stream);
    api.frames[stream.info.name] = (api.frames[stream.info.name] || 0) + 1;
    api.framesDrawn += 1;
  }

  async function frameLoop(stream) {
    for (;;) {
      const started = performance.now();
      if (wanted(stream)) {
        try {
          await fetchFrame(stream);
        } catch (error) {
          await sleep(1000);  // the server is away: try again soon
        }
      }
      await sleep(Math.max(10, 1000 / state.previewFps - (performance.now() - started)));
    }
  }

  // -- streams ----------------------------------------------------------------------------------

  function badgeClass(value) {
    if (["running", "streaming"].includes(value)) return "badge ok";
    if (["ended", "stopped", "removed", "starting"].includes(value)) return "badge";
    if (["error", "failed", "truncated"].includes(value)) return "badge bad";
    return "badge warn";
  }

  function setBadge(element, value) {
    element.textContent = String(value).replace(/_/g, " ");
    element.className = `${badgeClass(value)}${element.classList.contains("state") ? " state" : ""}`;
  }

  function addStream(info) {
    const tile = $("#tile-template").content.firstElementChild.cloneNode(true);
    tile.dataset.stream = info.name;
    $(".name", tile).textContent = info.name;
    const canvas = $("canvas", tile);
    canvas.dataset.stream = info.name;
    if (info.width && info.height) {
      canvas.width = info.width;
      canvas.height = info.height;
    }
    $(".view", tile).addEventListener("click", () => (state.view === info.name ? closeLarge() : openLarge(info.name)));
    const stream = {info, tile, canvas, ctx: canvas.getContext("2d"), bitmap: null, message: null, seq: null,
      figures: Object.fromEntries([...tile.querySelectorAll("[data-figure]")].map((e) => [e.dataset.figure, e]))};
    state.streams.set(info.name, stream);
    state.order.push(info.name);
    $("#grid").append(tile);
    frameLoop(stream);
    return stream;
  }

  async function refreshStreams() {
    state.streamsStale = false;
    const body = await getJson("/api/streams");
    state.previewFps = body.preview_fps || 5;
    state.budgetMs = body.budget_ms || 33;
    state.hasHistory = Boolean(body.history);
    setBadge($("#state"), body.state);
    for (const info of body.streams) {
      const stream = state.streams.get(info.name) || addStream(info);
      const geometryChanged = JSON.stringify([stream.info.lines, stream.info.zones]) !== JSON.stringify([info.lines, info.zones]);
      stream.info = info;
      setBadge($(".state", stream.tile), info.state);
      const uri = document.createElement("bdi");
      uri.textContent = info.uri;
      $(".uri", stream.tile).replaceChildren(uri);
      $(".uri", stream.tile).title = info.uri;
      if (geometryChanged) draw(stream);
    }
    api.ready = true;
  }

  function openLarge(name) {
    if (!state.streams.has(name)) return;
    state.view = api.view = name;
    for (const [n, stream] of state.streams) stream.tile.classList.toggle("big", n === name);
    document.body.classList.add("large");
    $("#back").hidden = false;
    requestAnimationFrame(redrawAll);  // the canvas' size on the screen changed: so do its labels
  }

  function closeLarge() {
    state.view = api.view = null;
    for (const stream of state.streams.values()) stream.tile.classList.remove("big");
    document.body.classList.remove("large");
    $("#back").hidden = true;
    requestAnimationFrame(redrawAll);
  }

  function setPaused(paused, show = true) {  // show: false leaves the button as it is (a screenshot)
    state.paused = api.paused = paused;
    if (!show) return;
    const button = $("#pause");
    button.setAttribute("aria-pressed", String(paused));
    button.textContent = paused ? "resume" : "pause";
  }

  // -- figures ----------------------------------------------------------------------------------

  const ms = (v) => (v == null ? "–" : v < 10 ? v.toFixed(1) : v.toFixed(0));

  function showFigures(stream, s) {
    const f = stream.figures;
    f.fps.textContent = s.fps.toFixed(1);
    f.latency.textContent = `${ms(s.latency_ms.p50)} / ${ms(s.latency_ms.p95)} ms`;
    f.latency.classList.toggle("over", stream.info.live && s.latency_ms.p95 > state.budgetMs);
    f.keyframes.textContent = `${s.keyframes_per_s.toFixed(1)}/s`;
    f.keyframes.title = `sent to the detector a second (in time or late); ${s.keyframes} in time so far ` +
      `(${Math.round(100 * s.keyframe_rate)}% of the last frames); detector ${ms(s.detect_ms.p50)} / ` +
      `${ms(s.detect_ms.p95)} ms a batch`;
    f.late.textContent = String(s.late_keyframes);
    f.late.title = `${s.deferred_keyframes} deferred, ${s.discarded_detections} detections too late to apply`;
    const causes = Object.entries(s.lost).filter(([, n]) => n > 0).map(([cause, n]) => `${cause} ${n}`);
    f.drops.textContent = s.dropped + (causes.length ? ` (${causes.join(", ")})` : "");
    f.drops.classList.toggle("warn", s.dropped > 0);
    const c = s.control;
    if (!c) {
      f.control.textContent = "–";
      f.control.title = "no budget controller watches this stream";
    } else {
      const parts = [c.level == null ? "" : `level ${c.level}`];
      if (c.keyframe_stretch > 1) parts.push(`x${c.keyframe_stretch}`);
      if (!c.keyframe_wait) parts.push("no wait");
      if (c.shed_fraction > 0) parts.push(`shed ${Math.round(100 * c.shed_fraction)}%`);
      f.control.textContent = parts.filter(Boolean).join(" · ") || "on";
      f.control.title = "the budget controller's hold: level, keyframe interval stretch, waiting for detections, frames shed";
      f.control.classList.toggle("warn", (c.level || 0) > 0);
    }
    setBadge($(".state", stream.tile), s.state);
  }

  function showCounts(stats) {
    const body = $("#counts tbody");
    const rows = [];
    for (const name of state.order) {
      const stream = state.streams.get(name), s = stats.streams[name];
      if (!stream || !s || !s.counts) continue;
      (stream.info.lines || []).forEach((line, k) => {
        const c = s.counts[line.name] || {};
        const d = dayOf(name, line.name);
        rows.push([name, line.name, LINE_COLORS[k % LINE_COLORS.length], `in ${c.in || 0}`, `out ${c.out || 0}`,
                   d && [`24 h: in ${d.in} · out ${d.out}`, hourly(d, (b) => b.in + b.out)]]);
      });
      (stream.info.zones || []).forEach((zone, k) => {
        const n = Number.isInteger(s.counts[zone.name]) ? s.counts[zone.name] : 0;
        const d = dayOf(name, zone.name);
        rows.push([name, zone.name, ZONE_COLORS[k % ZONE_COLORS.length], `${n} in it`, "",
                   d && [`24 h: ${d.count} entered`, hourly(d, (b) => b.count)]]);
      });
    }
    body.replaceChildren(...rows.map(([stream, rule, color, a, b, day]) => {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.textContent = stream;
      const td = document.createElement("td");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color;
      td.append(swatch, rule);
      const ta = Object.assign(document.createElement("td"), {className: "n", textContent: a});
      const tb = Object.assign(document.createElement("td"), {className: "n", textContent: b});
      tr.append(th, td, ta, tb);
      if (state.day) {
        tr.append(Object.assign(document.createElement("td"), {className: "n day", textContent: day ? day[0] : "",
                                                               title: day ? day[1] : ""}));
      }
      return tr;
    }));
    $("#no-counts").hidden = rows.length > 0;
  }

  // -- runtime.history: each rule's counts over the last 24 hours -------------------------------

  function dayOf(stream, rule) {
    return state.day ? state.day.get(`${stream}\u0000${rule}`) || {in: 0, out: 0, count: 0, hours: []} : null;
  }

  function hourly(d, value) {  // the tooltip: each hour's figure, oldest first
    return d.hours.map((b) => `${new Date(b.t * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit",
      hour12: false})} ${value(b)}`).join("\n");
  }

  async function refreshDay() {
    if (!state.hasHistory) return;  // no runtime.history (as /api/streams says): nothing to show
    const since = Math.floor(Date.now() / 1000) - 86400;
    const response = await fetch(`/api/history?since=${since}&bucket_s=3600`, {cache: "no-store"});
    if (!response.ok) return;
    const day = new Map();
    for (const b of (await response.json()).buckets) {
      const key = `${b.stream}\u0000${b.rule}`;
      const d = day.get(key) || {in: 0, out: 0, count: 0, hours: []};
      d.in += b.in; d.out += b.out; d.count += b.count;
      d.hours.push(b);
      day.set(key, d);
    }
    state.day = day;
    api.day = Object.fromEntries([...day].map(([k, d]) => [k.replace("\u0000", "/"), {in: d.in, out: d.out,
                                                                                       count: d.count}]));
  }

  function addHistory(history) {
    const h = state.history;
    h.t.push(...history.t);
    for (const [name, values] of Object.entries(history.p95)) {
      const column = h.p95[name] || (h.p95[name] = new Array(h.t.length - history.t.length).fill(null));
      column.push(...values);
    }
    const keep = 600;
    if (h.t.length > keep) {
      const cut = h.t.length - keep;
      h.t.splice(0, cut);
      for (const column of Object.values(h.p95)) column.splice(0, cut);
    }
    state.historyNext = history.next;
  }

  function niceStep(raw) {
    const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
    return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  }

  function drawPlot() {
    const canvas = $("#plot");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 340, height = canvas.clientHeight || 150;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const h = state.history, t = h.t;
    const left = 34, right = width - 6, top = 8, bottom = height - 18;
    let peak = state.budgetMs * 1.25, points = 0;
    for (const column of Object.values(h.p95)) for (const v of column) if (v != null && v > peak) peak = v;
    const end = t.length ? t[t.length - 1] : 0, span = Math.max(60, t.length ? end - t[0] : 60);
    const x = (ts) => right - ((end - ts) / span) * (right - left);
    const y = (v) => bottom - (v / (peak * 1.05)) * (bottom - top);
    // axes, the budget, the time scale
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#8b95a1";
    ctx.strokeStyle = "#2a3038";
    ctx.lineWidth = 1;
    ctx.textBaseline = "middle";
    const step = niceStep(peak / 3);
    for (let v = 0; v <= peak * 1.05; v += step) {
      ctx.beginPath();
      ctx.moveTo(left, y(v));
      ctx.lineTo(right, y(v));
      ctx.stroke();
      ctx.fillText(`${+v.toFixed(2)}`, 2, y(v));
    }
    ctx.textBaseline = "alphabetic";
    ctx.fillText(`ms, over the last ${Math.round(span / 60 * 10) / 10} min`, left, height - 4);
    ctx.fillText("now", right - 22, height - 4);
    ctx.setLineDash([4, 4]);
    ctx.strokeStyle = "#ff5c5c";
    ctx.beginPath();
    ctx.moveTo(left, y(state.budgetMs));
    ctx.lineTo(right, y(state.budgetMs));
    ctx.stroke();
    ctx.setLineDash([]);
    // one line per stream; a second without frames is a gap
    const legend = [];
    state.order.forEach((name, k) => {
      const column = h.p95[name] || [];
      const color = STREAM_COLORS[k % STREAM_COLORS.length];
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let open = false;
      column.forEach((v, i) => {
        if (v == null) {
          open = false;
          return;
        }
        points += 1;
        if (open) ctx.lineTo(x(t[i]), y(v));
        else ctx.moveTo(x(t[i]), y(v));
        open = true;
      });
      ctx.stroke();
      legend.push([name, color]);
    });
    legend.push([`budget ${state.budgetMs} ms`, "#ff5c5c"]);
    $("#legend").replaceChildren(...legend.map(([name, color]) => {
      const span = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = color;
      span.append(swatch, name);
      return span;
    }));
    api.plotPoints = points;
  }

  async function refreshStats() {
    const stats = await getJson(`/api/stats?history_since=${state.historyNext}`);
    setBadge($("#state"), stats.state);
    for (const [name, s] of Object.entries(stats.streams)) {
      const stream = state.streams.get(name);
      if (stream) showFigures(stream, s);
    }
    const d = stats.detector;
    $("#detector").textContent = `detector ${d.keyframes_per_s.toFixed(1)} keyframes/s · ` +
      `${Math.round(100 * d.detected_share)}% of frames · ${ms(d.detect_ms.p50)} / ${ms(d.detect_ms.p95)} ms`;
    showCounts(stats);
    addHistory(stats.history);
    drawPlot();
    api.statsUpdates += 1;
  }

  // -- events -----------------------------------------------------------------------------------

  function describe(e) {
    const obj = e.object || {};
    const who = `${obj.id >= 0 ? `#${obj.id} ` : ""}${obj.label || ""}`.trim();
    switch (e.event) {
      case "line_cross": return [`${e.line} ${e.direction}`, who];
      case "zone_enter": return [`entered ${e.zone}`, who];
      case "zone_exit": return [`left ${e.zone}`, `${who}${e.dwell_s != null ? ` after ${e.dwell_s.toFixed(1)} s` : ""}`];
      case "loiter": return [`loiters in ${e.zone}`, who];
      case "object_start": return ["new object", who];
      case "object_update": return ["object update", who];
      case "object_end": return ["object gone", `${who}${e.best_score != null ? ` best ${e.best_score.toFixed(2)}` : ""}`];
      default: return [e.event, who];
    }
  }

  function glyph(kind) {
    if (kind === "line_cross") return "\u21c4";
    if (kind.startsWith("zone") || kind === "loiter") return "\u25a3";
    return "\u25cf";
  }

  async function refreshEvents() {
    const found = await getJson(`/api/events?since=${state.eventsSince}`);
    if (!found.length) return;
    const list = $("#events");
    for (const {index, has_snapshot: shot, event: e} of found) {
      state.eventsSince = Math.max(state.eventsSince, index);
      const li = document.createElement("li");
      li.dataset.index = index;
      if (shot) {
        const img = Object.assign(document.createElement("img"), {className: "thumb", alt: "", loading: "lazy",
          src: `/api/events/${index}/snapshot.jpg`});
        li.append(img);
      } else {
        li.append(Object.assign(document.createElement("span"), {className: "thumb", textContent: glyph(e.event)}));
      }
      const [what, detail] = describe(e);
      const when = new Date(e.ts * 1000).toLocaleTimeString([], {hour12: false});
      const text = document.createElement("div");
      text.className = "what";
      const title = document.createElement("b");
      title.textContent = what;
      const sub = document.createElement("div");
      sub.textContent = `${when} · ${e.stream}${detail ? ` · ${detail}` : ""}`;
      if (e.clip) {  // analytics.clips: the MP4 around it, served once whole
        const link = Object.assign(document.createElement("a"), {className: "clip", target: "_blank",
          href: `/api/events/${index}/clip.mp4`, textContent: "\u25b6 clip"});
        sub.append(" · ", link);
      }
      text.append(title, sub);
      li.append(text);
      if (shot && state.hasHistory && e.object && e.object.id >= 0) {  // runtime.history: search by example
        const button = Object.assign(document.createElement("button"), {type: "button", className: "similar",
          textContent: "similar", title: "tracks that look like this one, in every stream (/api/search)"});
        button.addEventListener("click", () => showSimilar(e.stream, e.object.id, e.ts).catch(() => {}));
        li.append(button);
      }
      list.prepend(li);
    }
    while (list.children.length > EVENTS_SHOWN) list.lastElementChild.remove();
    $("#no-events").hidden = list.children.length > 0;
  }

  // -- search by example ------------------------------------------------------------------------

  async function showSimilar(stream, id, ts) {
    const panel = $("#similar");
    const list = $("#similar-list");
    panel.hidden = false;
    $("#similar-query").textContent = `#${id} of ${stream}`;
    list.replaceChildren();
    const response = await fetch(`/api/search?stream=${encodeURIComponent(stream)}&id=${id}&at=${ts}&limit=12`,
      {cache: "no-store"});
    const note = $("#similar-note");
    if (!response.ok) {
      note.textContent = (await response.text()).trim();
      api.similarShown = [];
      return;
    }
    const {results} = await response.json();
    for (const r of results) {
      const li = document.createElement("li");
      li.append(r.snapshot
        ? Object.assign(document.createElement("img"), {className: "thumb", alt: "", loading: "lazy", src: r.snapshot})
        : Object.assign(document.createElement("span"), {className: "thumb", textContent: "?"}));
      const when = new Date(r.last_ts * 1000).toLocaleTimeString([], {hour12: false});
      li.append(Object.assign(document.createElement("div"), {
        textContent: `${r.stream} #${r.id} · ${r.score.toFixed(2)} · ${when}`}));
      list.append(li);
    }
    note.textContent = results.length ? "" : "no track like it kept";
    api.similarShown = results.map((r) => ({stream: r.stream, id: r.id, score: r.score}));
  }

  // -- start ------------------------------------------------------------------------------------

  async function every(ms, job) {
    for (;;) {
      try {
        await job();
      } catch (error) {
        // the server is away or busy: the figures stay as they are until it answers again
      }
      await sleep(ms);
    }
  }

  function start() {
    $("#boxes").addEventListener("change", (e) => { state.boxes = e.target.checked; redrawAll(); });
    $("#rules").addEventListener("change", (e) => { state.rules = e.target.checked; redrawAll(); });
    $("#pause").addEventListener("click", () => setPaused(!state.paused));
    $("#back").addEventListener("click", closeLarge);
    $("#similar-close").addEventListener("click", () => { $("#similar").hidden = true; });
    document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeLarge(); });
    window.addEventListener("resize", () => { drawPlot(); redrawAll(); });
    let streamsAt = 0;
    every(250, async () => {  // every 3 s, and at once when a stream's first frame has come
      if (!state.streamsStale && performance.now() - streamsAt < 3000) return;
      streamsAt = performance.now();
      await refreshStreams();
    }).catch(() => {});
    every(1000, refreshStats).catch(() => {});
    every(1000, refreshEvents).catch(() => {});
    let dayAt = -Infinity;
    every(1000, async () => {  // the last 24 hours of counts: once a minute, and as soon as history is known
      if (state.day === null ? !state.hasHistory : performance.now() - dayAt < 60000) return;
      dayAt = performance.now();
      await refreshDay();
    }).catch(() => {});
  }

  start();
})();
