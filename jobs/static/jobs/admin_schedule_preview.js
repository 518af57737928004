// The job form's live preview: the schedule being typed, in words, and its next firings in
// the job's time zone, from the admin's preview endpoint (jobs/admin_preview.py).
"use strict";
(function () {
  const names = ["kind", "cron_expression", "interval_seconds", "run_at", "timezone"];

  function field(name) {
    return document.getElementById("id_" + name);
  }

  function render(box, data, edited) {
    box.replaceChildren();
    const head = document.createElement("p");
    if (data.error) {
      head.className = "errornote";
      head.textContent = data.error;
      box.append(head);
      return;
    }
    head.textContent = (edited ? "As edited: " : "") + (data.description || "");
    box.append(head);
    if (!data.firings || !data.firings.length) {
      return;
    }
    const label = document.createElement("p");
    label.textContent = "Next firings in " + data.timezone + ":";
    const list = document.createElement("ol");
    for (const instant of data.firings) {
      const item = document.createElement("li");
      item.textContent = instant;
      list.append(item);
    }
    box.append(label, list);
  }

  function start() {
    const cron = field("cron_expression");
    if (!cron || !cron.dataset.previewUrl) {
      return;
    }
    // On a change page the saved schedule is already previewed; show this one once edited.
    const edited = document.querySelector(".field-schedule_preview") !== null;
    const box = document.createElement("div");
    box.id = "schedule-live-preview";
    box.className = "help";
    const anchor = field("timezone").closest(".form-row") || field("timezone");
    anchor.after(box);
    let timer = null;
    let sequence = 0;
    function refresh() {
      const query = new URLSearchParams();
      for (const name of names) {
        const input = field(name);
        if (input) {
          query.set(name, input.value);
        }
      }
      const mine = ++sequence;
      fetch(cron.dataset.previewUrl + "?" + query.toString(), { credentials: "same-origin" })
        .then((response) => response.json())
        .then((data) => {
          if (mine === sequence) {
            render(box, data, edited);
          }
        })
        .catch(() => {});
    }
    for (const name of names) {
      const input = field(name);
      if (input) {
        input.addEventListener("input", () => {
          clearTimeout(timer);
          timer = setTimeout(refresh, 300);
        });
        input.addEventListener("change", refresh);
      }
    }
    if (!edited) {
      refresh();
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
