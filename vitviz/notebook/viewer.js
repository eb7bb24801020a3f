// vitviz notebook viewer: the browser half of vitviz.notebook.Viewer (anywidget ESM; no CDN, no dependencies).
// The kernel sends the photo (PNG), the maps at patch resolution (uint8 rows of a colour map's lookup table per
// patch, float16 values for the read-out, one frame per layer) and the lookup tables once; this file colours and
// blends them on a canvas exactly as vitviz's figures do (out = photo * (1 - a) + lut * a, a = alpha * opacity).

function bytes(v) {
  if (!v) return new Uint8Array(0);
  if (v instanceof Uint8Array) return v;
  if (v instanceof DataView) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === "string") { // base64 (some hosts send bytes so)
    const s = atob(v); const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  return new Uint8Array(0);
}

function half(h) { // IEEE float16 -> number
  const s = (h & 0x8000) ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * Math.pow(2, -14) * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * Math.pow(2, e - 15) * (1 + f / 1024);
}

function halves(v) {
  const b = bytes(v);
  const out = new Float32Array(b.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = half(b[2 * i] | (b[2 * i + 1] << 8));
  return out;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmt(v) {
  if (!isFinite(v)) return String(v);
  return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : String(+v.toPrecision(4));
}

function render({ model, el: root }) {
  root.classList.add("vitviz");
  root.tabIndex = 0;
  const bar = el("div", "vitviz-bar"), bar2 = el("div", "vitviz-bar");
  const viewSel = el("select", "vitviz-view");
  const layerBox = el("label", "vitviz-slider"), layerName = el("span", "", "Layer");
  const layerIn = el("input", "vitviz-layer"); layerIn.type = "range"; layerIn.step = 1;
  const layerVal = el("span", "vitviz-value");
  layerBox.append(layerName, layerIn, layerVal);
  const headBox = el("label", "vitviz-slider"), headIn = el("input", "vitviz-head"), headVal = el("span", "vitviz-value");
  headIn.type = "range"; headIn.step = 1; headBox.append(el("span", "", "Head"), headIn, headVal);
  const cmapSel = el("select", "vitviz-cmap");
  const opIn = el("input", "vitviz-opacity"); opIn.type = "range"; opIn.min = 0; opIn.max = 1; opIn.step = 0.05;
  const opBox = el("label", "vitviz-slider"); opBox.append(el("span", "", "Opacity"), opIn);
  const headsToggle = el("label", "vitviz-check"), headsIn = el("input"); headsIn.type = "checkbox";
  headsToggle.append(headsIn, el("span", "", "Heads"));
  bar.append(viewSel, layerBox, headBox, cmapSel, opBox, headsToggle);

  const prev = el("button", "vitviz-prev", "◀"), next = el("button", "vitviz-next", "▶");
  const imageName = el("span", "vitviz-image");
  const targetIn = el("input", "vitviz-target"); targetIn.placeholder = "target: top, a class, similar:IMAGE[@ROW,COL]";
  const targetList = el("datalist"); targetList.id = "vitviz-targets-" + Math.random().toString(36).slice(2);
  targetIn.setAttribute("list", targetList.id);
  const promptIn = el("input", "vitviz-prompts"); promptIn.placeholder = "prompts (CLIP / SigLIP): a cat; a dog";
  bar2.append(prev, imageName, next, targetIn, targetList, promptIn);

  const title = el("div", "vitviz-title");
  const stage = el("div", "vitviz-stage");
  const canvas = el("canvas", "vitviz-map");
  const side = el("div", "vitviz-side");
  const cbar = el("canvas", "vitviz-colorbar"); cbar.width = 256; cbar.height = 12;
  const ticks = el("div", "vitviz-ticks"), quantity = el("div", "vitviz-quantity");
  const preds = el("ol", "vitviz-predictions");
  side.append(quantity, cbar, ticks, preds);
  stage.append(canvas, side);
  const caption = el("div", "vitviz-caption"), hover = el("div", "vitviz-hover", "\u00a0");
  const note = el("div", "vitviz-note"), busy = el("div", "vitviz-busy"), status = el("div", "vitviz-status");
  const heads = el("div", "vitviz-heads");
  root.replaceChildren(bar, bar2, title, stage, caption, hover, note, busy, status, heads);

  let photo = null, photoFrom = null, photoSize = [0, 0], luts = null, lutNames = [], frames = null, values = null;
  let headFrames = null, headValues = null;

  function lut(name) {
    const i = Math.max(0, lutNames.indexOf(name));
    return luts.subarray(i * 1024, (i + 1) * 1024);
  }

  function frameIndex() {
    const meta = model.get("meta");
    if (!meta || !meta.count) return 0;
    return Math.min(Math.max(model.get("layer") - meta.first, 0), meta.count - 1);
  }

  function blend(out, photoPx, w, h, crop, grid, cells, vals, table, opacity, rgb, offset, neutral, neutralRgb) {
    const [gh, gw] = grid, [x0, y0, cw, ch] = crop;
    const grey = new Set((neutral || []).map(([r, c]) => r * gw + c)); // left out of the scale (figures' grey)
    for (let py = 0; py < h; py++) {
      const row = Math.floor((py + 0.5 - y0) / (ch / gh));
      if (row < 0 || row >= gh) continue;
      for (let px = 0; px < w; px++) {
        const col = Math.floor((px + 0.5 - x0) / (cw / gw));
        if (col < 0 || col >= gw) continue;
        const k = offset + row * gw + col;
        let r, g, b, a;
        if (rgb) {
          r = cells[4 * k]; g = cells[4 * k + 1]; b = cells[4 * k + 2]; a = cells[4 * k + 3] / 255;
        } else if (grey.has(row * gw + col)) {
          [r, g, b] = neutralRgb; a = 1;
        } else {
          if (vals && Number.isNaN(vals[k])) continue;
          const c = cells[k] * 4;
          r = table[c]; g = table[c + 1]; b = table[c + 2]; a = table[c + 3] / 255;
        }
        a *= opacity;
        const o = 4 * (py * w + px);
        out[o] = Math.round(photoPx[o] * (1 - a) + r * a);
        out[o + 1] = Math.round(photoPx[o + 1] * (1 - a) + g * a);
        out[o + 2] = Math.round(photoPx[o + 2] * (1 - a) + b * a);
      }
    }
  }

  function scaledCrop() {
    const pm = model.get("photo_meta");
    const [h, w] = pm.size, [ih, iw] = pm.image_size, [x0, y0, cw, ch] = pm.crop;
    const sx = w / iw, sy = h / ih;
    return [x0 * sx, y0 * sy, cw * sx, ch * sy];
  }

  function paint() {
    const meta = model.get("meta");
    // nothing is painted until the photo of these maps is decoded: a new image's maps never blend into the last photo
    if (!photo || photoFrom !== model.get("photo") || !meta || !meta.frames || !luts) return;
    const [h, w] = photoSize;
    canvas.width = w; canvas.height = h;
    const k = Math.max(1, Math.floor(448 / Math.max(w, h)));
    canvas.style.width = (w * k) + "px"; canvas.style.height = (h * k) + "px";
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(w, h);
    img.data.set(photo);
    const i = frameIndex(), f = meta.frames[i];
    const n = meta.grid[0] * meta.grid[1];
    const crop = scaledCrop();
    if (!f.unavailable) {
      const table = f.scale ? lut(f.scale.cmap) : null;
      blend(img.data, photo, w, h, crop, meta.grid, frames, meta.rgb ? null : values, table,
            model.get("opacity"), meta.rgb, i * n, f.neutral, f.neutral_rgb);
    }
    ctx.putImageData(img, 0, 0);
    if (f.marker) { // the query patch, outlined as in the window
      const [x0, y0, cw, ch] = crop, gw = meta.grid[1], q = model.get("query");
      const r = Math.floor(q / gw), c = q % gw, sx = cw / meta.grid[1], sy = ch / meta.grid[0];
      ctx.strokeStyle = "rgb(0,230,255)"; ctx.lineWidth = Math.max(1, w / 200);
      ctx.strokeRect(x0 + c * sx + 0.5, y0 + r * sy + 0.5, sx - 1, sy - 1);
    }
    if (f.outlined && f.outlined.length) { // the artefact tokens, dashed as in the window
      const [x0, y0, cw, ch] = crop, sx = cw / meta.grid[1], sy = ch / meta.grid[0];
      ctx.save(); ctx.setLineDash([3, 2]); ctx.strokeStyle = "rgb(255,150,40)"; ctx.lineWidth = Math.max(1, w / 300);
      for (const [r, c] of f.outlined) ctx.strokeRect(x0 + c * sx + 0.5, y0 + r * sy + 0.5, sx - 1, sy - 1);
      ctx.restore();
    }
    title.textContent = f.title;
    caption.textContent = f.caption;
    note.textContent = f.unavailable ? `${f.title}: ${f.unavailable}` : "";
    layerVal.textContent = f.label || "";
    drawColorbar(f.scale);
    root.dataset.painted = [meta.view, model.get("layer"), model.get("query"), model.get("head"),
                            model.get("opacity"), meta.frames.length, model.get("image_index")].join("|");
  }

  function drawColorbar(scale) {
    const ctx = cbar.getContext("2d");
    ctx.clearRect(0, 0, cbar.width, cbar.height);
    ticks.replaceChildren();
    quantity.textContent = scale ? scale.quantity : "";
    cbar.style.visibility = scale ? "visible" : "hidden";
    if (!scale) return;
    const t = lut(scale.cmap), img = ctx.createImageData(256, cbar.height);
    for (let y = 0; y < cbar.height; y++) for (let x = 0; x < 256; x++) {
      const o = 4 * (y * 256 + x);
      img.data[o] = t[4 * x]; img.data[o + 1] = t[4 * x + 1]; img.data[o + 2] = t[4 * x + 2]; img.data[o + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    for (const [v, label] of scale.ticks) {
      let p = scale.log ? (Math.log10(v) - Math.log10(scale.lo)) / (Math.log10(scale.hi) - Math.log10(scale.lo))
                        : (v - scale.lo) / (scale.hi - scale.lo);
      if (!(p >= 0 && p <= 1)) continue;
      const tick = el("span", "vitviz-tick", label);
      tick.style.left = (p * 100) + "%";
      ticks.append(tick);
    }
  }

  function paintHeads() {
    heads.replaceChildren();
    const hm = model.get("head_meta");
    if (!model.get("show_heads") || !hm || !hm.count || !photo || !luts) return;
    heads.append(el("div", "vitviz-heads-title", hm.title));
    const [h, w] = photoSize, crop = scaledCrop(), n = hm.grid[0] * hm.grid[1];
    const table = lut(hm.scale.cmap);
    for (let i = 0; i < hm.count; i++) {
      const tile = el("div", "vitviz-tile"), c = el("canvas");
      c.width = w; c.height = h;
      const ctx = c.getContext("2d"), img = ctx.createImageData(w, h);
      img.data.set(photo);
      blend(img.data, photo, w, h, crop, hm.grid, headFrames, headValues, table, model.get("opacity"), false, i * n);
      ctx.putImageData(img, 0, 0);
      tile.append(c, el("div", "", `head ${i}`));
      tile.title = `show head ${i}`;
      tile.addEventListener("click", () => { model.set("head", String(i)); model.save_changes(); });
      heads.append(tile);
    }
  }

  function loadPhoto() {
    const from = model.get("photo"), png = bytes(from);
    if (!png.length) return;
    photo = null; // the maps of a new image wait for its photo (the canvas keeps the last picture meanwhile)
    const url = URL.createObjectURL(new Blob([png], { type: "image/png" }));
    const im = new Image();
    im.onload = () => {
      URL.revokeObjectURL(url);
      if (model.get("photo") !== from) return; // a newer photo came while this one was decoded
      photoFrom = from;
      const c = document.createElement("canvas");
      c.width = im.naturalWidth; c.height = im.naturalHeight;
      const ctx = c.getContext("2d");
      ctx.drawImage(im, 0, 0);
      photo = ctx.getImageData(0, 0, c.width, c.height).data;
      photoSize = [c.height, c.width];
      paint(); paintHeads();
    };
    im.src = url;
  }

  function fillControls() {
    const vs = model.get("views") || [];
    viewSel.replaceChildren(...vs.map((v) => {
      const o = el("option", "", v.available ? v.title : `${v.title} (unavailable: ${v.reason})`);
      o.value = v.key; o.disabled = !v.available; o.title = v.reason || v.title;
      return o;
    }));
    viewSel.value = model.get("view");
    const cur = vs.find((v) => v.key === model.get("view")) || {};
    const [lo, hi] = model.get("layer_range");
    layerIn.min = lo; layerIn.max = hi; layerIn.value = model.get("layer");
    layerIn.disabled = !cur.slider; layerName.textContent = cur.slider || "Layer";
    const hs = model.get("heads") || [];
    headIn.min = 0; headIn.max = Math.max(0, hs.length - 1);
    headIn.value = Math.max(0, hs.indexOf(model.get("head")));
    headVal.textContent = hs[headIn.value] || "";
    headIn.disabled = !cur.reads_head;
    cmapSel.replaceChildren(...(model.get("lut_names") || []).map((n) => { const o = el("option", "", n); o.value = n; return o; }));
    cmapSel.value = model.get("cmap");
    opIn.value = model.get("opacity");
    headsIn.checked = model.get("show_heads");
    const ims = model.get("images") || [], idx = model.get("image_index");
    imageName.textContent = ims.length ? `${ims[idx] || ""} (${idx + 1}/${ims.length})` : "";
    prev.disabled = next.disabled = ims.length < 2;
    if (document.activeElement !== targetIn) targetIn.value = model.get("target");
    if (document.activeElement !== promptIn) promptIn.value = model.get("prompts");
    const opts = ["top", ...(model.get("classes") || []),
                  ...ims.map((n) => `similar:${n}`), ...ims.map((n) => `similar:${n}@0,0`)];
    targetList.replaceChildren(...opts.map((t) => { const o = el("option"); o.value = t; return o; }));
    preds.replaceChildren(...(model.get("predictions") || []).map(([i, label, p]) =>
      el("li", "", `${label} ${(100 * p).toFixed(1)}%`)));
    const tl = model.get("target_label");
    if (tl) preds.append(el("div", "vitviz-target-label", `target: ${tl}`));
  }

  function send(name, value) { model.set(name, value); model.save_changes(); }

  function setLayer(v) {
    const [lo, hi] = model.get("layer_range");
    v = Math.min(Math.max(v, lo), hi);
    layerIn.value = v;
    model.set("layer", v); // the frames are here: repaint now, tell the kernel
    paint();
    model.save_changes();
  }

  function stepHead(d) {
    const hs = model.get("heads") || [];
    if (!hs.length) return;
    const i = (Math.max(0, hs.indexOf(model.get("head"))) + d + hs.length) % hs.length;
    send("head", hs[i]);
  }

  function stepImage(d) {
    const n = (model.get("images") || []).length;
    if (n > 1) send("image_index", (model.get("image_index") + d + n) % n);
  }

  function patchAt(ev) {
    const meta = model.get("meta"), pm = model.get("photo_meta");
    if (!meta || !pm) return null;
    const r = canvas.getBoundingClientRect();
    const px = (ev.clientX - r.left) * canvas.width / r.width, py = (ev.clientY - r.top) * canvas.height / r.height;
    const [x0, y0, cw, ch] = scaledCrop(), [gh, gw] = meta.grid;
    const row = Math.floor((py - y0) / (ch / gh)), col = Math.floor((px - x0) / (cw / gw));
    const ix = Math.floor(px * pm.image_size[1] / canvas.width), iy = Math.floor(py * pm.image_size[0] / canvas.height);
    return { row, col, ix, iy, inside: row >= 0 && row < gh && col >= 0 && col < gw };
  }

  viewSel.addEventListener("change", () => send("view", viewSel.value));
  layerIn.addEventListener("input", () => setLayer(+layerIn.value));
  headIn.addEventListener("input", () => {
    const hs = model.get("heads") || []; headVal.textContent = hs[+headIn.value] || ""; send("head", hs[+headIn.value]);
  });
  cmapSel.addEventListener("change", () => send("cmap", cmapSel.value));
  opIn.addEventListener("input", () => { model.set("opacity", +opIn.value); paint(); paintHeads(); model.save_changes(); });
  headsIn.addEventListener("change", () => send("show_heads", headsIn.checked));
  prev.addEventListener("click", () => stepImage(-1));
  next.addEventListener("click", () => stepImage(1));
  targetIn.addEventListener("change", () => send("target", targetIn.value));
  promptIn.addEventListener("change", () => send("prompts", promptIn.value));
  canvas.addEventListener("mousemove", (ev) => {
    const p = patchAt(ev), meta = model.get("meta");
    if (!p) return;
    const pix = `pixel (${p.ix}, ${p.iy})`;
    if (!p.inside) { hover.textContent = `${pix} · outside the model's crop`; return; }
    const f = meta.frames[frameIndex()], n = meta.grid[0] * meta.grid[1];
    const v = values[frameIndex() * n + p.row * meta.grid[1] + p.col] * f.absmax;
    const token = model.get("photo_meta").prefix + p.row * meta.grid[1] + p.col;
    hover.textContent = `${pix} · patch (row ${p.row}, col ${p.col}) · token ${token} · value ${fmt(v)}`;
  });
  canvas.addEventListener("mouseleave", () => { hover.textContent = "\u00a0"; });
  canvas.addEventListener("click", (ev) => {
    const p = patchAt(ev), meta = model.get("meta");
    if (!p || !p.inside) return;
    model.set("query", p.row * meta.grid[1] + p.col);
    const cur = (model.get("views") || []).find((v) => v.key === model.get("view"));
    const q = (model.get("views") || []).find((v) => v.key === "query");
    if (cur && !cur.reads_query && q && q.available) model.set("view", "query");
    model.save_changes();
  });
  root.addEventListener("keydown", (ev) => {
    if (["INPUT", "SELECT", "TEXTAREA"].includes(ev.target.tagName) && ev.target.type !== "range") return;
    const acts = { ArrowRight: () => setLayer(model.get("layer") + 1), ArrowLeft: () => setLayer(model.get("layer") - 1),
                   Home: () => setLayer(model.get("layer_range")[0]), End: () => setLayer(model.get("layer_range")[1]),
                   ArrowUp: () => stepHead(1), ArrowDown: () => stepHead(-1),
                   PageDown: () => stepImage(1), PageUp: () => stepImage(-1) };
    if (acts[ev.key]) { acts[ev.key](); ev.preventDefault(); ev.stopPropagation(); }
  });

  function takeMaps() {
    frames = bytes(model.get("frames"));
    values = halves(model.get("values"));
    headFrames = bytes(model.get("head_frames"));
    headValues = halves(model.get("head_values"));
    luts = bytes(model.get("luts")); lutNames = model.get("lut_names") || [];
  }

  function showStatus() {
    status.textContent = model.get("status");
    busy.textContent = model.get("busy") ? `⏳ ${model.get("busy")}…` : "";
    root.dataset.busy = model.get("busy") ? "1" : "";
  }

  const onMaps = () => { takeMaps(); fillControls(); paint(); paintHeads(); };
  model.on("change:frames", onMaps);
  model.on("change:values", onMaps);
  model.on("change:meta", onMaps);
  model.on("change:head_frames", () => { takeMaps(); paintHeads(); });
  model.on("change:head_meta", () => { takeMaps(); paintHeads(); });
  model.on("change:photo", loadPhoto);
  for (const t of ["views", "heads", "layer_range", "images", "image_index", "classes", "predictions", "target",
                   "prompts", "target_label", "cmap", "view", "head"]) model.on(`change:${t}`, fillControls);
  model.on("change:layer", () => { layerIn.value = model.get("layer"); paint(); });
  model.on("change:query", paint);
  model.on("change:opacity", () => { opIn.value = model.get("opacity"); paint(); paintHeads(); });
  model.on("change:show_heads", () => { headsIn.checked = model.get("show_heads"); paintHeads(); });
  model.on("change:status", showStatus);
  model.on("change:busy", showStatus);
  takeMaps(); fillControls(); showStatus(); loadPhoto();
}

export default { render };
