// Draws the report's charts from the JSON embedded in the page, with the inlined Chart.js.
// Animation is off: a chart is complete as soon as it is made, for readers and screenshots alike.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const palette = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#1b7c83", "#6e7781"];
  const errorShades = ["#cf222e", "#fa4549", "#a40e26", "#ff8182", "#82071e"];
  let drawn = 0;

  function base(extra) {
    return Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, extra);
  }

  function draw(canvas, config) {
    if (typeof Chart === "undefined") {
      canvas.parentElement.outerHTML = '<p class="chart-missing">Charts are unavailable: the charting library could not be fetched when this report was built.</p>';
      return;
    }
    new Chart(canvas, config);
    drawn += 1;
  }

  function empty(canvas, text) {
    canvas.closest("figure").outerHTML = '<p class="chart-missing">' + text + "</p>";
  }

  function barChart(canvas, labels, values, label, horizontal) {
    // One bar per row: the chart grows with its rows instead of squeezing or stretching them.
    if (horizontal) canvas.parentElement.style.height = 50 + 26 * labels.length + "px";
    draw(canvas, {
      type: "bar",
      data: { labels: labels, datasets: [{ label: label, data: values, backgroundColor: palette[0], maxBarThickness: 22 }] },
      options: base({ indexAxis: horizontal ? "y" : "x", plugins: { legend: { display: false } } }),
    });
  }

  function areaDurations(canvas) {
    const rows = data.areaDurations;
    if (!rows.length) return empty(canvas, "No checks ran.");
    barChart(canvas, rows.map((r) => r.area), rows.map((r) => r.seconds), "seconds", true);
  }

  function recovery(canvas) {
    const rows = data.recovery;
    if (!rows.length) return empty(canvas, "No check measured a recovery time in this run.");
    const labels = rows.map((r) => r.check + (r.params ? " [" + r.params + "]" : "") + " · " + r.metric);
    barChart(canvas, labels, rows.map((r) => r.seconds), "seconds", true);
  }

  function trend(canvas) {
    const runs = data.trend;
    const areas = [...new Set(runs.flatMap((r) => Object.keys(r.areas)))].sort();
    const share = (run, area) => {
      const c = run.areas[area];
      return c && c.ran ? Math.round((100 * c.passed) / c.ran) : null;
    };
    draw(canvas, {
      type: "line",
      data: {
        labels: runs.map((r) => r.run_id),
        datasets: areas.map((area, i) => ({
          label: area, data: runs.map((r) => share(r, area)), borderColor: palette[i % palette.length],
          backgroundColor: palette[i % palette.length], spanGaps: true,
        })),
      },
      options: base({ scales: { y: { min: 0, max: 100, title: { display: true, text: "% passed" } } } }),
    });
    trendTable(runs, areas);
  }

  function trendTable(runs, areas) {
    const table = document.getElementById("trend-table");
    const head = "<thead><tr><th>run</th>" + areas.map((a) => "<th>" + a + "</th>").join("") + "</tr></thead>";
    const body = runs.map((run) => "<tr><th>" + escapeText(run.run_id) + "</th>" + areas.map((a) => {
      const c = run.areas[a];
      return "<td>" + (c ? c.passed + "/" + c.ran : "") + "</td>";
    }).join("") + "</tr>").join("");
    table.innerHTML = head + "<tbody>" + body + "</tbody>";
  }

  function escapeText(text) {
    const span = document.createElement("span");
    span.textContent = text;
    return span.innerHTML;
  }

  function figure(parent, caption, name) {
    const fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.timeline = name;
    const cap = document.createElement("figcaption");
    cap.textContent = caption;
    const box = document.createElement("div");
    box.className = "canvas-box";
    const canvas = document.createElement("canvas");
    canvas.dataset.chart = name;
    box.appendChild(canvas);
    fig.append(cap, box);
    parent.appendChild(fig);
    return canvas;
  }

  function events(parent, timeline) {
    if (!timeline.events.length) return;
    const p = document.createElement("p");
    p.className = "events";
    p.textContent = "Events: " + timeline.events.map((e) => "t=" + e.t + " s " + e.label).join(" · ");
    parent.appendChild(p);
  }

  const seconds = { type: "linear", title: { display: true, text: "seconds" } };

  function autoscaling(parent, timeline) {
    const sets = [];
    Object.entries(timeline.series).forEach(([group, points], i) => {
      const color = palette[i % palette.length];
      sets.push({ label: group, data: points.map(([x, y]) => ({ x: x, y: y })), stepped: true, borderColor: color, backgroundColor: color });
      const wanted = (timeline.desired || {})[group];
      if (wanted) sets.push({ label: group + " (desired)", data: wanted.map(([x, y]) => ({ x: x, y: y })), stepped: true, borderDash: [6, 4], borderColor: color, backgroundColor: color, pointRadius: 0 });
    });
    const canvas = figure(parent, timeline.title + " — replicas", "autoscaling");
    draw(canvas, { type: "line", data: { datasets: sets }, options: base({ scales: { x: seconds, y: { beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: "replicas" } } } }) });
  }

  function upgrade(parent, timeline) {
    const rows = timeline.seconds;
    const labels = rows.map((s) => s.t);
    const kinds = [...new Set(rows.flatMap((s) => Object.keys(s.errors)))].sort();
    const ok = rows.map((s) => s.requests - Object.values(s.errors).reduce((a, b) => a + b, 0));
    const requestSets = [{ label: "succeeded", data: ok, backgroundColor: "#8c959f", stack: "r" }].concat(
      kinds.map((k, i) => ({ label: k, data: rows.map((s) => s.errors[k] || 0), backgroundColor: errorShades[i % errorShades.length], stack: "r" })));
    const grid = document.createElement("div");
    grid.className = "timeline-grid";
    parent.appendChild(grid);
    draw(figure(grid, timeline.title + " — requests per second", "upgrade-requests"), {
      type: "bar", data: { labels: labels, datasets: requestSets },
      options: base({ scales: { x: { stacked: true, title: { display: true, text: "seconds" } }, y: { stacked: true, beginAtZero: true } } }),
    });
    draw(figure(grid, timeline.title + " — latency (ms)", "upgrade-latency"), {
      type: "line", data: { labels: labels, datasets: [
        { label: "p50", data: rows.map((s) => s.p50_ms), borderColor: palette[0], backgroundColor: palette[0] },
        { label: "p99", data: rows.map((s) => s.p99_ms), borderColor: palette[1], backgroundColor: palette[1] }] },
      options: base({ scales: { y: { beginAtZero: true } } }),
    });
    const clusters = [...new Set(rows.flatMap((s) => Object.keys(s.traffic || {})))];
    if (clusters.length) {
      draw(figure(grid, timeline.title + " — traffic split (%)", "upgrade-traffic"), {
        type: "line", data: { labels: labels, datasets: clusters.map((c, i) => ({
          label: c, data: rows.map((s) => (s.traffic || {})[c] ?? null), fill: true, stepped: true,
          borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length] + "55" })) },
        options: base({ scales: { y: { stacked: true, min: 0, max: 100 } } }),
      });
    }
  }

  function timelines() {
    const parent = document.getElementById("timelines");
    data.timelines.forEach((timeline) => {
      const section = document.createElement("div");
      section.className = "timeline timeline-" + timeline.kind;
      section.dataset.check = timeline.check;
      const title = document.createElement("h3");
      title.textContent = timeline.check.split("::").pop();
      section.appendChild(title);
      parent.appendChild(section);
      (timeline.kind === "autoscaling" ? autoscaling : upgrade)(section, timeline);
      events(section, timeline);
    });
  }

  const charts = { "area-durations": areaDurations, recovery: recovery, trend: trend };
  document.querySelectorAll("canvas[data-chart]").forEach((canvas) => charts[canvas.dataset.chart](canvas));
  timelines();
  // Read by the project's browser tests: how many charts were drawn.
  document.body.dataset.chartsDrawn = String(drawn);
})();
