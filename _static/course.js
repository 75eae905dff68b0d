// Transformers, Executed: wide tables, outputs and formulas scroll inside their own box (course.css).
// Mark each box whose content runs past its right or left edge, so the stylesheet can fade that
// edge: the visible cue that there is more to scroll to. Re-checked on scroll, on resize and once
// MathJax has typeset the formulas (which changes their width).
(function () {
  const BOXES = ".pst-scrollable-table-container, .cell_output .output, div.math, " +
                'mjx-container[display="true"]';
  function update(box) {
    const hidden = box.scrollWidth - box.clientWidth;
    box.classList.toggle("scroll-more-right", hidden - box.scrollLeft > 1);
    box.classList.toggle("scroll-more-left", hidden > 1 && box.scrollLeft > 1);
  }
  function markAll() {
    document.querySelectorAll(BOXES).forEach(function (box) {
      update(box);
      if (!box.dataset.scrollCue) {
        box.dataset.scrollCue = "1";
        box.addEventListener("scroll", function () { update(box); }, { passive: true });
      }
    });
  }
  window.addEventListener("load", function () {
    markAll();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markAll);
    }
  });
  window.addEventListener("resize", markAll);
})();

// Every part of a page belongs to a landmark (axe-core's "region" rule): the theme's primary
// sidebar (the course's title, the search button, the table of contents) is a plain <div>, so a
// screen reader's landmark list skipped its title and search button. Name it a complementary region.
(function () {
  function label() {
    const sidebar = document.getElementById("pst-primary-sidebar");
    if (sidebar && !sidebar.hasAttribute("role")) {
      sidebar.setAttribute("role", "complementary");
      sidebar.setAttribute("aria-label", "Course contents");
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", label);
  } else {
    label();
  }
})();
