"use strict";
// Loaded between Swagger UI's bundle and drf-spectacular's init script, it adds one plugin
// to every SwaggerUIBundle(...) call, for what Swagger UI's own markup leaves out:
// - the API's title and description sit outside any landmark (only the operations are in
//   a <main>): they become the page's banner (axe: region);
// - the title is an <h1> and each tag of operations an <h3> (swagger-api/swagger-ui#10703):
//   an "Operations" <h2>, for screen readers only, goes between them (axe: heading-order).
(() => {
  const bundle = window.SwaggerUIBundle;
  const outline = () => ({
    wrapComponents: {
      InfoContainer: (Original, system) => (props) =>
        system.React.createElement(
          "header",
          { role: "banner" }, // inside Swagger UI's <section>, a bare <header> is no landmark
          system.React.createElement(Original, props),
        ),
      operations: (Original, system) => (props) =>
        system.React.createElement(
          system.React.Fragment,
          null,
          system.React.createElement("h2", { className: "visually-hidden" }, "Operations"),
          system.React.createElement(Original, props),
        ),
    },
  });
  window.SwaggerUIBundle = Object.assign(
    (options) => bundle({ ...options, plugins: [...(options.plugins || []), outline] }),
    bundle,
  );
})();
