"""Layers, each importing only those below it: events < readers < model < measures < results < renderers < tensorboard < report."""
