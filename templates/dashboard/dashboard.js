// ralph serve: keeps a page live from the server's event stream (server-sent events).
// Every piece of HTML put in place here was rendered and escaped by the server; this script
// never turns event data into markup itself.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-stream");
  var live = document.getElementById("live");
  if (!url) {
    return;
  }
  function say(text, cls) {
    if (live) {
      live.textContent = text;
      live.className = "live " + (cls || "");
    }
  }
  // what a person is typing survives a section being replaced
  function keep(section) {
    var kept = {};
    section.querySelectorAll("[data-keep]").forEach(function (field) {
      kept[field.getAttribute("data-keep")] = field.value;
    });
    return kept;
  }
  function restore(section, kept) {
    section.querySelectorAll("[data-keep]").forEach(function (field) {
      var value = kept[field.getAttribute("data-keep")];
      if (value) {
        field.value = value;
      }
    });
  }
  var source = new EventSource(url);
  source.onopen = function () { say("live", "on"); };
  source.onerror = function () {
    if (source.readyState !== EventSource.CLOSED) {
      say("reconnecting…", "off");
    }
  };
  source.addEventListener("section", function (message) {
    var data = JSON.parse(message.data);
    var section = document.getElementById(data.id);
    if (!section) {
      return;
    }
    var active = document.activeElement;
    if (active && section.contains(active) && active.tagName === "TEXTAREA" && active.value) {
      return; // never pull a form from under a person typing; the next change brings it again
    }
    var kept = keep(section);
    section.innerHTML = data.html;
    restore(section, kept);
  });
  source.addEventListener("rows", function (message) {
    var data = JSON.parse(message.data);
    var list = document.getElementById("stream");
    if (!list) {
      return;
    }
    list.insertAdjacentHTML("afterbegin", data.html);
    while (list.children.length > 300) {
      list.removeChild(list.lastElementChild);
    }
  });
  source.addEventListener("end", function () {
    source.close();
    say("the run has ended", "done");
  });
})();
